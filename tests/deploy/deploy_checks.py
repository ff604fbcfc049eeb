"""What the deployment checks (check_docs.py, check_manifests.py) share: the repository and build
paths, the failure list, reading a repository file, and the closing summary."""
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("VGPU_BUILD_DIR", os.path.join(ROOT, "build"))
failures = []


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def finish(passed):
    """The exit status: 1 after any failure (counted), else 0 with the `passed` line."""
    if failures:
        print("\n%d failure(s)" % len(failures))
        return 1
    print(passed)
    return 0
