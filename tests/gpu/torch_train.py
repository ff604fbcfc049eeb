"""Real-GPU check: a small PyTorch training loop, captured whole into a CUDA graph and replayed,
then a few eager steps through torch.compile. Prints losses; run.sh compares them with and without
libvgpu.so."""
import sys

import torch

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"

free, total = torch.cuda.mem_get_info()
print(f"mem_get_info total GiB {total / 2**30:.2f}", file=sys.stderr)

model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
loss_fn = torch.nn.CrossEntropyLoss()
x = torch.randn(1024, 256, device=dev)
y = torch.randint(0, 10, (1024,), device=dev)

# Warm up on a side stream, then capture forward + backward + step (PyTorch's whole-network capture).
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
torch.cuda.current_stream().wait_stream(side)

graph = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    static_loss = loss_fn(model(x), y)
    static_loss.backward()
    opt.step()

for step in range(60):
    graph.replay()
    if step % 10 == 9:
        print(f"graph step {step + 1} loss {static_loss.item():.6f}")

compiled = torch.compile(torch.nn.Sequential(torch.nn.Linear(256, 64), torch.nn.Tanh()).to(dev))
out = compiled(x)
print(f"torch.compile output sum {out.sum().item():.4f}")
torch.cuda.synchronize()
print("torch done")
