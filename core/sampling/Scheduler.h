// Scheduler: diffusers' noise schedules and the DDPM, DDIM, Euler, Euler ancestral, DPM++ 2M
// (SDE), Heun, LMS and DPM2 samplers (diffusers schedulers/scheduling_*.py), each step reduced to the per-step scalars of
// core/sampling/StepUpdate.h so that every backend applies the same arithmetic.
//
// Usage: create(kind, options), setTimesteps(N), then for k = 0 … N-1 feed the UNet
// x * coefficients(k).modelInputScale with timestep coefficients(k).timestep and
// update x with applyStep(coefficients(k), x, eps, z, x0Prev) (or step()), keeping
// predictX0(coefficients(k), x, eps) as the next step's x0Prev (read only by DPM++ 2M's
// second-order steps; the first step run has none: withoutPreviousX0). The initial noise is
// N(0, 1) * initNoiseSigma(); an image-to-image start at step b is addNoise(b).
//
// What each kind is (diffusers' class, with the options Tessera has):
//   ddpm      DDPMScheduler;  ddim  DDIMScheduler (eta);
//   euler     EulerDiscreteScheduler (use_karras_sigmas; x0 clipped when clip_sample, see .cpp);
//   euler_a   EulerAncestralDiscreteScheduler: eta 1, noise z of step k on every step with
//             sigma_up != 0 (diffusers also draws at the last step, where sigma_up = 0); it has
//             no Karras option: use_karras_sigmas is ignored;
//   dpmpp_2m  DPMSolverMultistepScheduler, algorithm_type "dpmsolver++", solver_order 2,
//             solver_type "midpoint", lower_order_final true, final_sigmas_type "zero"
//             (diffusers' defaults; the last step is first order), use_karras_sigmas;
//   dpmpp_2m_sde  the same class and options with algorithm_type "sde-dpmsolver++" (A1111's
//             "DPM++ 2M SDE", k-diffusion sample_dpmpp_2m_sde, eta 1, midpoint): noise z of step k on
//             every step but the last (σ_N = 0). diffusers draws it with randn_tensor, k-diffusion
//             and A1111 from a Brownian tree; Tessera uses the run's noise of step k (see README).
//   heun, lms, dpm2  HeunDiscreteScheduler, LMSDiscreteScheduler (order 4, as k-diffusion and
//             A1111), KDPM2DiscreteScheduler (use_karras_sigmas): Euler's σ table, one step of this
//             class per model evaluation, earlier evaluations kept in history buffers (StepUpdate.h);
//   dpmpp_sde DPMSolverSDEScheduler (A1111's "DPM++ SDE", k-diffusion sample_dpmpp_sde, eta 1, r 1/2):
//             two evaluations per step, each adding noise z of its own (diffusers and A1111 draw
//             from a Brownian tree; Tessera uses the run's noise of that evaluation, see README).
// Where this header says DPM++ 2M, it means dpmpp_2m_sde as well; where it says Euler, it means
// Heun, LMS, DPM2 and DPM++ SDE as well (σ tables, initNoiseSigma, addNoise).
// Euler, Euler a and DPM++ 2M clip x0 when clip_sample (pixel-space models; diffusers' classes
// have no clip_sample); SD's schedules set it false, where they are diffusers exactly.
// Every kind takes scaled_linear (SD) or the other beta schedules, epsilon / v_prediction /
// sample (euler_a: not sample, as diffusers) and leading / trailing / linspace spacing with
// steps_offset, as diffusers computes them for that class.
//
// Precision: betas, alphas and ᾱ are float32 computed as PyTorch does on the CPU
// (torch.linspace's float32 rule; torch.cumprod accumulates float32 input in double and
// rounds each element). The per-step coefficients are derived in double from those
// float32 tables and rounded to float once.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/run/RunConfig.h"
#include "core/sampling/StepUpdate.h"

namespace tessera {

// Most training timesteps a schedule may have (diffusers models use 1000; the tables hold one
// float per timestep and Euler's sigma lookup walks them once per step).
inline constexpr int kMaxTrainTimesteps = 100000;

// Throws ValidationError naming the first bad value, with what is allowed and why:
// num_train_timesteps 1..kMaxTrainTimesteps; beta_start and beta_end in (0, 1) with
// beta_start <= beta_end (linear and scaled_linear; squaredcos_cap_v2 ignores them);
// steps_offset 0..num_train_timesteps - 1; clip_sample_range finite and > 0 when clip_sample;
// eta in [0, 1]; then the schedule they give: every alphas_cumprod (float32) in (0, 1) and
// strictly decreasing. Scheduler::create checks the same; front ends and model loaders call this
// to refuse a configuration before any work (it builds the betas and alphas_cumprod tables only).
void checkSchedulerOptions(const SchedulerOptions& options);

// torch.linspace(start, end, n, dtype=float32) on the CPU: step = (end - start) / (n - 1)
// in float32; value i = start + step * i for i < n / 2, else end - step * (n - 1 - i).
std::vector<float> torchLinspace(float start, float end, int n);

// The training noise schedule β_0 … β_{Tn-1} (float32) for options.betaSchedule.
// Throws ValidationError as checkSchedulerOptions on bad option values (not the table check).
std::vector<float> betaSchedule(const SchedulerOptions& options);

// ᾱ_t = Π_{s ≤ t} (1 - β_s), as torch.cumprod on float32 (double accumulator, float results).
std::vector<float> alphasCumprodFromBetas(const std::vector<float>& betas);

// Integer timesteps of set_timesteps(n) for DDPM/DDIM (descending). Leading adds stepsOffset,
// trailing and linspace do not (as diffusers). Rounding is NumPy's half-to-even.
// Trailing returns exactly n values (NumPy's arange can yield one more, ending at t = -1,
// for some n such as 61 of 1000; that extra entry is an upstream artefact and is dropped).
// Throws ValidationError("steps") unless 1 <= n <= numTrainTimesteps, and
// ValidationError("steps_offset") if a timestep would leave [0, Tn - 1].
std::vector<int> spacedTimesteps(int numTrainTimesteps, int n, TimestepSpacing spacing, int stepsOffset);

class Scheduler {
public:
    // Throws ValidationError (the field named) for options that checkSchedulerOptions refuses.
    static std::unique_ptr<Scheduler> create(SchedulerKind kind, const SchedulerOptions& options);
    virtual ~Scheduler() = default;
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Plans n sampling steps. Throws ValidationError("steps") unless 1 <= n <= numTrainTimesteps.
    // numSteps() is then the number of model evaluations: n, or 2n - 1 for Heun, DPM2, DPM++ SDE.
    virtual void setTimesteps(int n);
    // Model evaluations per step (diffusers' scheduler.order): 2 for Heun, DPM2, DPM++ SDE, else 1. An
    // image-to-image start at step b of n begins at evaluation b * evaluationsPerStep().
    virtual int evaluationsPerStep() const { return 1; }
    // An image-to-image run begins at step b (diffusers' set_begin_index): schedulers whose first
    // steps differ from the later ones (UniPC's warm-up: no corrector and first order at the first
    // step run) plan their coefficients from b. Call after setTimesteps; a no-op for the others
    // (their first step is withoutPreviousX0's).
    virtual void setBeginIndex(int /*begin*/) {}

    SchedulerKind kind() const { return kind_; }
    const SchedulerOptions& options() const { return options_; }
    int numTrainTimesteps() const { return options_.numTrainTimesteps; }

    // The UNet timestep of each step, descending (integers for DDPM/DDIM/DPM++ 2M, floats for Euler).
    const std::vector<float>& timesteps() const { return timesteps_; }
    int numSteps() const { return static_cast<int>(timesteps_.size()); }
    // Scale of the initial N(0, 1) noise: 1 for DDPM/DDIM/DPM++ 2M, the largest σ for Euler and
    // Euler a (sqrt(σ² + 1) with leading spacing).
    float initNoiseSigma() const { return initNoiseSigma_; }
    // Euler, Euler a, DPM++ 2M: σ_0 … σ_{N-1}, 0 (N + 1 values); empty for DDPM/DDIM.
    const std::vector<float>& sigmas() const { return sigmas_; }

    // Per-step scalars for step k (0-based). Throws std::logic_error before setTimesteps,
    // std::out_of_range for k outside [0, numSteps()).
    StepCoefficients coefficients(int stepIndex) const;
    // Whether step k draws fresh noise z (sigma != 0): DDPM for t > 0, DDIM with eta > 0,
    // Euler a where sigma_up != 0, DPM++ 2M SDE but at its last step.
    bool addsNoise(int stepIndex) const { return coefficients(stepIndex).sigma != 0.0f; }
    // Whether step k reads the previous step's x0 (DPM++ 2M's second-order steps).
    bool usesPreviousX0(int stepIndex) const { return coefficients(stepIndex).cprev != 0.0f; }

    // out[i] = applyStep(K, x[i], eps[i], z[i], x0Prev[i]) with K = coefficients(k), or
    // withoutPreviousX0(K) when x0Prev is null (no step ran before this one: the first step of
    // a run, from noise or from an image). z may be null when the step adds no noise
    // (std::invalid_argument otherwise). out may alias x, eps or x0Prev.
    void step(int stepIndex, const float* eps, const float* x, const float* z, float* out, std::size_t n,
              const float* x0Prev = nullptr) const;
    // out[i] = predictX0(coefficients(k), x[i], eps[i]): what step k's successor reads as x0Prev.
    void predictX0(int stepIndex, const float* eps, const float* x, float* out, std::size_t n) const;

    // What a run carries from step to step: the previous x0 and the history buffers
    // (StepUpdate.h), empty until the first step after the start.
    struct StepHistory {
        std::vector<float> x0Prev;
        std::vector<float> h[kStepHistory];
    };
    // Step k for any kind: step() with history.x0Prev (none while empty), the history terms of
    // applyStepWithHistory, then history.x0Prev = this step's x0 and each h_j rewritten
    // (nextHistory). out may alias x or eps. The plain step() above throws std::logic_error for a
    // step that uses history (Heun, LMS, DPM2).
    void step(int stepIndex, const float* eps, const float* x, const float* z, float* out, std::size_t n,
              StepHistory& history) const;

    const std::vector<float>& betas() const { return betas_; }
    const std::vector<float>& alphasCumprod() const { return alphasCumprod_; }

    // ᾱ at a (possibly fractional) training timestep t, clamped to [0, Tn - 1]. Integer t
    // gives ᾱ[t] exactly; between integers σ = sqrt((1-ᾱ)/ᾱ) is interpolated linearly in t
    // (as Euler's np.interp does) and ᾱ = 1 / (1 + σ²).
    float alphaCumprodAt(float t) const;
    // ᾱ of the noise level that step k starts from: ᾱ[t_k] for DDPM/DDIM, 1 / (1 + σ_k²) for
    // Euler, Euler a and DPM++ 2M (whose Karras σ_k need not equal σ_train(t_k)). Use this, not
    // alphaCumprodAt(k): that one takes a timestep, not a step index.
    float alphaCumprodForStep(int stepIndex) const;

    // Image-to-image start at step b (diffusers' add_noise after set_begin_index(b)):
    // x_b = image * clean + noise * n, n ~ N(0, 1), in the state this scheduler steps:
    //   DDPM, DDIM      sqrt(ᾱ[t_b]), sqrt(1 - ᾱ[t_b])   (VP)
    //   Euler, Euler a  1, σ_b                          (VE: z + σ n, no further scaling)
    //   DPM++ 2M        α_b = 1 / sqrt(σ_b² + 1), σ_b α_b   (VP)
    struct AddNoise {
        float image = 1.0f, noise = 0.0f;
    };
    virtual AddNoise addNoise(int stepIndex) const;

protected:
    Scheduler(SchedulerKind kind, const SchedulerOptions& options);
    void checkSteps(int n) const;
    // checkSteps(n), then the n timesteps of the configured spacing (spacedTimesteps).
    std::vector<int> checkedTimesteps(int n) const;

    SchedulerKind kind_;
    SchedulerOptions options_;
    std::vector<float> betas_;
    std::vector<float> alphasCumprod_;
    std::vector<float> timesteps_;
    std::vector<float> sigmas_;
    std::vector<StepCoefficients> coefficients_;
    float initNoiseSigma_ = 1.0f;
};

}  // namespace tessera
