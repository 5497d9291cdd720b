// cuBLASLt GEMMs of the CUDA backend (tensor/cuda/gemm.h): the plan cache (descriptors + the
// heuristic's algorithm per problem), lt_matmul (strided-batched, transposed views without
// copies, bias/activation/aux epilogues), gemm_bias_act and gemm_bias_gelu_aux for nn::Linear.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>

#include "tensor/cuda_api.h"
#include "tensor/cuda/gemm.h"
#include "tensor/cuda/runtime/handles.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/ops.h"

namespace minidl::cuda {
namespace {

// cuBLASLt types for a tensor dtype: storage, scale (alpha/beta) and accumulation.
struct LtTypes {
  cudaDataType_t data, scale;
  cublasComputeType_t compute;
};

LtTypes lt_types(DType t, const char* op) {
  switch (t) {
    case DType::f32:
      return {CUDA_R_32F, CUDA_R_32F,
              allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case DType::f64:
      return {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::f16:
      return {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::bf16:
      return {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    default:
      MINIDL_FAIL("op `", op, "` on CUDA supports dtypes float32, float64, float16 and bfloat16, ",
                  "got dtype ", t);
  }
}

// A batch of R x C matrices inside a [B,R,C] tensor, as a column-major cuBLAS operand:
// row-major matrices (inner stride 1) are column-major C x R with ld = row stride (trans =
// false); column-major ones (row stride 1, a transposed view) are R x C (trans = true).
struct MatView {
  Tensor t;  // the tensor itself, or a contiguous copy of it
  bool trans;
  int64_t ld, bstride;
};

MatView plan_view(const Tensor& t) {
  const int64_t R = t.size(1), C = t.size(2), sr = t.stride(1), sc = t.stride(2);
  const int64_t one = t.size(0) == 1 ? 0 : t.stride(0);  // the batch stride of a single matrix
  if (t.stride(0) >= 0) {
    if ((sc == 1 || C == 1) && (R == 1 || sr >= std::max<int64_t>(C, 1)))
      return {t, false, R == 1 ? std::max<int64_t>(C, 1) : sr, one};
    if ((sr == 1 || R == 1) && (C == 1 || sc >= std::max<int64_t>(R, 1)))
      return {t, true, C == 1 ? std::max<int64_t>(R, 1) : sc, one};
  }
  return {native::contiguous(t), false, std::max<int64_t>(C, 1), R * C};
}

// Largest power of two (<= 256) dividing the address: cuBLASLt's alignment preference.
uint32_t alignment(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// The alignment every matrix of an operand keeps: its base address, and the byte offsets
// of its columns (ld) and of later batches (bstride) must all be multiples of it.
uint32_t alignment(const MatView& v) {
  uint32_t a = alignment(v.t.data_ptr());
  const uint64_t esize = uint64_t(v.t.element_size());
  for (uint64_t step : {uint64_t(v.ld) * esize, uint64_t(v.bstride) * esize})
    while (a > 1 && step % a != 0) a /= 2;
  return a;
}

// Everything a cached plan depends on.
using PlanKey = std::array<int64_t, 22>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false: no algorithm supports this epilogue (caller falls back)
};

void set_layout(cublasLtMatrixLayout_t* l, cudaDataType_t type, uint64_t rows, uint64_t cols,
                int64_t ld, int32_t batch, int64_t bstride) {
  const CublasLtApi& lt = cublaslt_api();
  MINIDL_CUBLAS_CHECK(lt.cublasLtMatrixLayoutCreate(l, type, rows, cols, ld));
  if (batch > 1) {
    MINIDL_CUBLAS_CHECK(lt.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                            &batch, sizeof(batch)));
    MINIDL_CUBLAS_CHECK(lt.cublasLtMatrixLayoutSetAttribute(
        *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &bstride, sizeof(bstride)));
  }
}

cublasLtEpilogue_t lt_epilogue(Epilogue ep, bool bias) {
  switch (ep) {
    case Epilogue::relu:
      return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case Epilogue::gelu_tanh:
      return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case Epilogue::bgradb:
      return CUBLASLT_EPILOGUE_BGRADB;
    case Epilogue::gelu_tanh_aux:
      return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::dgelu:
      return CUBLASLT_EPILOGUE_DGELU;
    default:
      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

// Column-major problem: C[N,M] = op(A) op(B) with A := b-operand, B := a-operand (row-major
// C = a b is the column-major C^T = b^T a^T).
struct Problem {
  MatView a, b;  // a:[B,M,K] b:[B,K,N] as tensors
  int64_t batch, M, N, K;
  const void* bias;  // nullptr without bias
  Epilogue ep;
  void* aux = nullptr;  // gelu_tanh_aux (written), dgelu (read): the GELU's input, [M,N] like C
};

// True when the problem asks for a bias or an activation in the GEMM's epilogue.
bool ep_is_fused(const Problem& p) {
  return p.bias != nullptr || p.ep != Epilogue::none;
}

// Looks up (or builds: descriptors + the heuristic's best algorithm) the plan for a problem.
// The cache lives for the process; lookups neither allocate nor synchronise. The caller
// holds the lock.
// ty: the operands' types (and the accumulation); c_type: C and D's (ty.data, or f32 for
// f16/bf16 operands whose product is kept in f32).
Plan& get_plan(const Problem& p, const Tensor& c, const LtTypes& ty, cudaDataType_t c_type,
               size_t ws_bytes) {
  const int dev = c.device().index;
  const PlanKey key{dev,
                    int64_t(c.dtype()),
                    int64_t(ty.data),
                    int64_t(ty.compute),
                    int64_t(p.ep),
                    p.bias != nullptr,
                    p.a.trans,
                    p.b.trans,
                    p.batch,
                    p.M,
                    p.N,
                    p.K,
                    p.a.ld,
                    p.b.ld,
                    p.a.bstride,
                    p.b.bstride,
                    alignment(p.a),
                    alignment(p.b),
                    alignment(MatView{c, false, p.N, p.M * p.N}),
                    p.bias ? alignment(p.bias) : 0,
                    p.aux ? alignment(p.aux) : 0,  // the heuristic reads its alignment too
                    int64_t(ws_bytes)};
  static std::map<PlanKey, Plan> cache;  // guarded by lt_matmul's lock
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;

  const CublasLtApi& lt = cublaslt_api();
  Plan pl;
  MINIDL_CUBLAS_CHECK(lt.cublasLtMatmulDescCreate(&pl.desc, ty.compute, ty.scale));
  const cublasOperation_t opa = p.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS A = b
  const cublasOperation_t opb = p.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS B = a
  MINIDL_CUBLAS_CHECK(
      lt.cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  MINIDL_CUBLAS_CHECK(
      lt.cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  const cublasLtEpilogue_t epi = lt_epilogue(p.ep, p.bias != nullptr);
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
    MINIDL_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                          &epi, sizeof(epi)));
    if (p.bias) {  // set per call too; the heuristic only needs a non-null pointer
      MINIDL_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(
          pl.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
      // the bias (or its gradient) has C's type
      MINIDL_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(
          pl.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c_type, sizeof(c_type)));
    }
    if (p.ep == Epilogue::gelu_tanh_aux || p.ep == Epilogue::dgelu) {  // C's layout: ld N
      const int64_t aux_ld = p.N;
      MINIDL_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(
          pl.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof(p.aux)));
      MINIDL_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(
          pl.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
  }
  const int32_t batch = int32_t(p.batch);
  const uint64_t M = uint64_t(p.M), N = uint64_t(p.N), K = uint64_t(p.K);
  set_layout(&pl.la, ty.data, p.b.trans ? K : N, p.b.trans ? N : K, p.b.ld, batch, p.b.bstride);
  set_layout(&pl.lb, ty.data, p.a.trans ? M : K, p.a.trans ? K : M, p.a.ld, batch, p.a.bstride);
  set_layout(&pl.lc, c_type, N, M, p.N, batch, p.M * p.N);

  cublasLtMatmulPreference_t pref = nullptr;
  MINIDL_CUBLAS_CHECK(lt.cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = ws_bytes;
  MINIDL_CUBLAS_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al[4] = {uint32_t(key[17]), uint32_t(key[16]), uint32_t(key[18]),
                          uint32_t(key[18])};
  const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    MINIDL_CUBLAS_CHECK(
        lt.cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof(al[i])));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t st = lt.cublasLtMatmulAlgoGetHeuristic(
      cublaslt_handle(dev), pl.desc, pl.la, pl.lb, pl.lc, pl.lc, pref, 1, &result, &returned);
  lt.cublasLtMatmulPreferenceDestroy(pref);
  // A heuristic that fails (not merely finds nothing) while a graph is being captured is not
  // cached as "no algorithm": the plans are built by the eager steps before a capture.
  MINIDL_CHECK(
      st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED || !is_capturing(dev),
      "op `bmm`: cuBLASLt's heuristic failed (status ", int(st), ") for a [", p.batch, ", ", p.M,
      ", ", p.K, "] x [", p.batch, ", ", p.K, ", ", p.N,
      "] product first met during CUDA graph capture; run the step once before "
      "capturing it");
  pl.found = st == CUBLAS_STATUS_SUCCESS && returned > 0;
  // epilogues and widened outputs fall back instead
  if (!pl.found && epi == CUBLASLT_EPILOGUE_DEFAULT && c_type == ty.data) {
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) MINIDL_CUBLAS_CHECK(st);
    MINIDL_FAIL("op `bmm`: cuBLASLt found no algorithm for a [", p.batch, ", ", p.M, ", ", p.K,
                "] x [", p.batch, ", ", p.K, ", ", p.N, "] product of dtype ", c.dtype());
  }
  pl.algo = result.algo;
  return cache.emplace(key, pl).first->second;
}

}  // namespace

// c:[B,M,N] contiguous = a b (+ bias, activation). K > 0. Returns false when no cuBLASLt
// algorithm supports the requested epilogue (nothing was queued).
bool lt_matmul(const Tensor& a, const Tensor& b, Tensor& c, const void* bias, Epilogue ep,
               const char* op, void* aux) {
  // f16/bf16 operands with an f32 c: the f32 accumulator is the result (no 16-bit rounding).
  const bool widened = c.dtype() == kFloat32 && a.dtype() != kFloat32;
  MINIDL_CHECK(
      a.dtype() == b.dtype() && (a.dtype() == c.dtype() ||
                                 (widened && (a.dtype() == kBFloat16 || a.dtype() == kFloat16))),
      "op `", op, "`: operands ", a.dtype(), " x ", b.dtype(), " -> ", c.dtype(),
      " is not a supported cuBLASLt combination");
  const LtTypes ty = lt_types(a.dtype(), op);
  const cudaDataType_t c_type = lt_types(c.dtype(), op).data;
  MINIDL_CHECK(c.size(0) <= INT32_MAX, "op `", op, "`: batch size ", c.size(0),
               " exceeds cuBLASLt's limit of 2^31 - 1 (shapes ", a.shape_str(), " and ",
               b.shape_str(), ")");
  const int dev = c.device().index;
  TensorDeviceGuard guard(dev);
  size_t ws_bytes = 0;
  void* ws = lt_workspace(dev, &ws_bytes);
  const Problem p{plan_view(a), plan_view(b), c.size(0), c.size(1), c.size(2),
                  a.size(2),    bias,         ep,        aux};
  static std::mutex call_mu;  // the bias pointer is written into the shared descriptor
  std::lock_guard<std::mutex> lock(call_mu);
  Plan& pl = get_plan(p, c, ty, c_type, ws_bytes);
  if (!pl.found) return false;
  const CublasLtApi& lt = cublaslt_api();
  if (bias)
    MINIDL_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(
        pl.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (aux)
    MINIDL_CUBLAS_CHECK(lt.cublasLtMatmulDescSetAttribute(
        pl.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  const float f1 = 1.f, f0 = 0.f;
  const double d1 = 1.0, d0 = 0.0;
  const bool dbl = ty.scale == CUDA_R_64F;
  const void* alpha = dbl ? static_cast<const void*>(&d1) : &f1;
  const void* beta = dbl ? static_cast<const void*>(&d0) : &f0;
  const cublasStatus_t st = lt.cublasLtMatmul(
      cublaslt_handle(dev), pl.desc, alpha, p.b.t.data_ptr(), pl.la, p.a.t.data_ptr(), pl.lb, beta,
      c.data_ptr(), pl.lc, c.data_ptr(), pl.lc, &pl.algo, ws, ws_bytes, stream_of(c));
  if (st != CUBLAS_STATUS_SUCCESS && ep_is_fused(p) &&
      (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)) {
    pl.found = false;  // an epilogue this cuBLASLt refuses at launch: the caller falls back,
    return false;      // now and for every later call of this plan
  }
  MINIDL_CUBLAS_CHECK(st);
  return true;
}

void check_gemm_dtype(DType t, const char* op) {
  (void)lt_types(t, op);
}

void gemm_bias_act(const Tensor& x2d, const Tensor& w, const Tensor& bias, Tensor& out,
                   Epilogue ep) {
  constexpr const char* op = "gemm_bias_act";
  MINIDL_CHECK(x2d.defined() && w.defined() && out.defined(), "op `", op,
               "`: got an undefined tensor");
  MINIDL_CHECK(x2d.dim() == 2 && w.dim() == 2 && out.dim() == 2 && x2d.size(1) == w.size(1) &&
                   out.size(0) == x2d.size(0) && out.size(1) == w.size(0),
               "op `", op, "`: expected x:[M,K], w:[N,K], out:[M,N], got x ", x2d.shape_str(),
               ", w ", w.shape_str(), ", out ", out.shape_str());
  MINIDL_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0)), "op `", op,
               "`: expected bias:[", w.size(0), "], got bias of shape ", bias.shape_str());
  for (const Tensor* t : std::array<const Tensor*, 3>{&w, &bias, &out}) {
    if (!t->defined()) continue;
    MINIDL_CHECK(t->dtype() == x2d.dtype() && t->device() == x2d.device(), "op `", op,
                 "`: expected every tensor to be ", x2d.dtype(), " on ", x2d.device(), ", got ",
                 t->dtype(), " on ", t->device(), " (shape ", t->shape_str(), ")");
  }
  MINIDL_CHECK(x2d.device().is_cuda() && out.is_contiguous(), "op `", op,
               "`: expected CUDA tensors and a contiguous out, got out of shape ", out.shape_str(),
               " on ", out.device());
  (void)lt_types(x2d.dtype(), op);
  if (out.numel() == 0) return;
  TensorDeviceGuard guard(out);
  const Tensor b = bias.defined() ? native::contiguous(bias) : Tensor();
  // cuBLASLt's GELU epilogue is not f64-accurate (about 1e-6 relative off, measured on an H200):
  // in f64 the GEMM fuses only the bias and GELU runs as its own op.
  const Epilogue fused_ep =
      ep == Epilogue::gelu_tanh && x2d.dtype() == kFloat64 ? Epilogue::none : ep;
  if (x2d.size(1) > 0) {
    Tensor out3 = native::unsqueeze(out, 0);
    if (lt_matmul(native::unsqueeze(x2d, 0), native::unsqueeze(native::t(w), 0), out3,
                  b.defined() ? b.data_ptr() : nullptr, fused_ep, op)) {
      if (fused_ep != ep) native::copy_(out, native::gelu(out, "tanh"));
      return;
    }
  }
  // No fused kernel for this dtype / shape: the same result from separate ops.
  Tensor r = native::matmul(x2d, native::t(w));
  if (b.defined()) r = native::add(r, b);
  if (ep == Epilogue::relu) r = native::relu(r);
  if (ep == Epilogue::gelu_tanh) r = native::gelu(r, "tanh");
  native::copy_(out, r);
}

bool gemm_bias_gelu_aux(const Tensor& x2d, const Tensor& w, const Tensor& bias, Tensor& pre,
                        Tensor& out) {
  const DType dt = x2d.dtype();
  // cuBLASLt's GELU input matrix needs a leading dimension divisible by 8 (N here); its GELU
  // is not f64-accurate (gemm_bias_act), and K = 0 has no GEMM to fuse into.
  if (!(dt == kFloat32 || dt == kFloat16 || dt == kBFloat16) || !bias.defined() ||
      w.size(0) % 8 != 0 || x2d.size(1) == 0 || out.numel() == 0 || !pre.is_contiguous() ||
      !out.is_contiguous() || pre.dtype() != dt || out.dtype() != dt)
    return false;
  TensorDeviceGuard guard(out);
  const Tensor b = native::contiguous(bias);
  Tensor out3 = native::unsqueeze(out, 0);
  return lt_matmul(native::unsqueeze(x2d, 0), native::unsqueeze(native::t(w), 0), out3,
                   b.data_ptr(), Epilogue::gelu_tanh_aux, "linear_gelu", pre.data_ptr());
}

}  // namespace minidl::cuda
