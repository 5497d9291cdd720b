// Image loading throughput (data/image/): ImageFolder + DataLoader with torchvision's ImageNet
// training recipe (RandomResizedCrop SIZE + RandomHorizontalFlip + ToTensor + Normalize) in
// images/s, WORKERS worker threads, shuffled batches of BATCH, BATCHES batches after a warm-up
// batch, best of ROUNDS; bench/torch_image_loader.py is torchvision's twin on the same files.
// Usage: bench_image_loader ROOT [WORKERS=2] [BATCH=64] [BATCHES=12] [SIZE=224] [ROUNDS=3]
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "bench_common.h"
#include "data/dataloader.h"
#include "data/image/image_folder.h"
#include "data/image/image_transforms.h"
#include "data/transforms.h"
#include "tensor/threads.h"

using namespace minidl;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ROOT [WORKERS] [BATCH] [BATCHES] [SIZE] [ROUNDS]\n", argv[0]);
    return 2;
  }
  const int workers = argc > 2 ? std::atoi(argv[2]) : 2;
  const int64_t batch = argc > 3 ? std::atoll(argv[3]) : 64;
  const int batches = argc > 4 ? std::atoi(argv[4]) : 12;
  const int64_t size = argc > 5 ? std::atoll(argv[5]) : 224;
  const int rounds = argc > 6 ? std::atoi(argv[6]) : 3;
  set_num_threads(1);  // the workers are the parallelism, as in torch's DataLoader workers
  auto transform =
      std::make_shared<data::Compose>(std::vector<std::shared_ptr<const data::Transform>>{
          std::make_shared<data::RandomResizedCrop>(size),
          std::make_shared<data::RandomHorizontalFlip>(), std::make_shared<data::ToTensor>(),
          std::make_shared<data::Normalize>(std::vector{0.485, 0.456, 0.406},
                                            std::vector{0.229, 0.224, 0.225})});
  auto ds = std::make_shared<data::ImageFolder>(argv[1], transform);
  data::DataLoader loader(
      ds, {.batch_size = batch, .shuffle = true, .drop_last = true, .num_workers = workers});
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    loader.start_epoch(r);
    data::Example b;
    loader.next(b);  // warm-up: workers started, first batch
    const double t0 = bench::now_s();
    int done = 0;
    while (done < batches && loader.next(b)) ++done;
    const double dt = bench::now_s() - t0;
    best = std::max(best, double(done * batch) / dt);
  }
  std::printf(
      "minidl ImageFolder + DataLoader: %.1f images/s (%d workers, batch %lld, %lldx%lld, "
      "%lld images)\n",
      best, workers, (long long)batch, (long long)size, (long long)size, (long long)ds->size());
  return 0;
}
