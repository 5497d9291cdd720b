// Guide example 4 (docs/guide.md): DistributedDataParallel by hand, as with torch.distributed:
// a model with two inputs (an image and a pixel mask), init_process_group from the launcher's
// environment, a DistributedSampler, metrics reduced over ranks, a checkpoint written by rank 0.
// Usage: minidl-run -n 2 ddp_multi_input DATA_DIR [MAX_STEPS]   (torchrun / srun work too)
#include <cstdio>
#include <string>

#include "masked_net.h"
#include "minidl.h"
using namespace minidl;

using examples::MaskedNet;

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "data/mnist";
  const int64_t max_steps = argc > 2 ? std::stoll(argv[2]) : -1;
  // [snippet:ddp]
  dist::init_process_group();  // RANK, WORLD_SIZE, MASTER_ADDR/PORT from the launcher
  const int rank = dist::get_rank(), world = dist::get_world_size();
  set_num_threads(1);  // two ranks share this machine's cores

  manual_seed(0);  // the same initial weights everywhere (DDP also broadcasts rank 0's)
  auto model = std::make_shared<MaskedNet>();
  dist::DistributedDataParallel ddp(model);  // the default group
  optim::AdamW opt(model->parameters(), 1e-3);

  auto train_set = std::make_shared<data::MnistDataset>(dir, data::MnistSplit::train);
  auto sampler = std::make_shared<data::DistributedSampler>(train_set->size(), world, rank,
                                                            /*shuffle=*/true, /*seed=*/0);
  data::DataLoader loader(train_set, {.batch_size = 32}, sampler);  // 32 per rank

  Generator mask_gen(dist::rank_seed(0, rank));  // this rank's own random stream
  int64_t step = 0;
  double loss_sum = 0;
  for (int epoch = 1; epoch <= 1; ++epoch) {
    for (data::Example& b : loader.epoch(epoch)) {  // set_epoch(epoch): a new shuffle
      Tensor keep = gt(rand(b.data.shape(), kFloat32, kCPU, &mask_gen), 0.25).to(kFloat32);
      Tensor loss = cross_entropy(ddp(b.data, keep), b.target);
      opt.zero_grad();
      loss.backward();  // gradients are averaged over the ranks during backward
      opt.step();
      loss_sum += loss.item<double>();
      if (++step == max_steps) break;
    }
  }
  const double mean_loss = dist::all_reduce_mean(loss_sum / double(step));  // over ranks
  dist::printf_main("ddp: %d ranks, %lld steps each, mean loss %.4f\n", world, (long long)step,
                    mean_loss);
  dist::save_on_main([&] { nn::save_weights("masked.safetensors", *model); });  // rank 0 writes
  dist::barrier();
  // [/snippet]
  // Every rank holds the same weights after training: compare against the saved file.
  auto check = std::make_shared<MaskedNet>();
  nn::load_weights("masked.safetensors", *check);
  bool same = true;
  const auto a = model->state_dict(), c = check->state_dict();
  for (const auto& [name, t] : a) same = same && equal(t, c.at(name));
  const bool ok = dist::all_reduce_sum(same ? 0.0 : 1.0) == 0.0 && mean_loss < 1.5;
  dist::printf_main("ddp_multi_input: %s\n", ok ? "ok (weights equal on every rank)" : "FAILED");
  dist::destroy_process_group();
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ddp_multi_input: error: %s\n", e.what());
  return 2;
}
