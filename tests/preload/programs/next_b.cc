// Helper library B for the RTLD_NEXT test: the next definition after library A.
extern "C" __attribute__((visibility("default"))) int vgpu_test_symbol() { return 2; }
