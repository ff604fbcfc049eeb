"""Real-GPU check: CuPy arrays, cuBLAS, an elementwise and a reduction kernel. Prints results;
run.sh compares them with and without libvgpu.so."""
import cupy as cp

cp.random.seed(0)
a = cp.random.rand(1024, 1024, dtype=cp.float64)
b = cp.random.rand(1024, 1024, dtype=cp.float64)
c = a @ b
print(f"matmul sum {float(c.sum()):.6f}")
square_diff = cp.ElementwiseKernel("float64 x, float64 y", "float64 z", "z = (x - y) * (x - y)", "square_diff")
print(f"elementwise sum {float(square_diff(a, b).sum()):.6f}")
print(f"max {float(c.max()):.6f} argmax {int(c.argmax())}")
free, total = cp.cuda.runtime.memGetInfo()
print("cupy done")
