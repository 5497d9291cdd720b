# torchvision's ImageFolder + DataLoader throughput, the reference for bench_image_loader: PIL
# decoding (torchvision's default loader), RandomResizedCrop(SIZE) + RandomHorizontalFlip +
# ToTensor + Normalize, shuffled batches of BATCH, WORKERS worker processes; images/s over BATCHES
# batches after one warm-up batch, best of ROUNDS (each round a fresh loader iterator).
# Usage: python3 bench/torch_image_loader.py ROOT [WORKERS=2] [BATCH=64] [BATCHES=12] [SIZE=224] [ROUNDS=3]
import sys
import time

import torch
import torchvision
import torchvision.transforms as T

root = sys.argv[1]
workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 64
batches = int(sys.argv[4]) if len(sys.argv) > 4 else 12
size = int(sys.argv[5]) if len(sys.argv) > 5 else 224
rounds = int(sys.argv[6]) if len(sys.argv) > 6 else 3
torch.set_num_threads(1)
tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = torchvision.datasets.ImageFolder(root, transform=tf)
loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                     persistent_workers=workers > 0, drop_last=True)
best = 0.0
for r in range(rounds):
    it = iter(loader)
    next(it)  # warm-up: workers started, first batch
    t0 = time.perf_counter()
    for _ in range(batches):
        x, y = next(it)
    dt = time.perf_counter() - t0
    best = max(best, batches * batch / dt)
    del it
print(f"torchvision {torchvision.__version__} (torch {torch.__version__}, PIL): {best:.1f} images/s "
      f"({workers} workers, batch {batch}, {size}x{size}, {len(ds)} images)")
