#include "core/sampling/Scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/base/FormatNumber.h"

namespace tessera {

namespace {

// NumPy's np.round / np.rint: half to even (the default FE_TONEAREST mode of nearbyint).
double roundHalfEven(double v) { return std::nearbyint(v); }

// numpy.linspace(0, stop, n) in float64: i * (stop / (n - 1)), the last value exactly stop.
std::vector<double> numpyLinspaceFromZero(double stop, int n) {
    std::vector<double> y(static_cast<std::size_t>(n), 0.0);
    if (n < 2) return y;
    const double step = stop / (n - 1);
    for (int i = 0; i < n; ++i) y[static_cast<std::size_t>(i)] = i * step;
    y.back() = stop;
    return y;
}

// numpy.arange(Tn, 0, -Tn/n) rounded half-to-even, first n values. NumPy fills
// arange as start + i * delta with delta = (start + step) - start.
std::vector<double> trailingValues(int numTrainTimesteps, int n) {
    const double start = numTrainTimesteps;
    const double ratio = start / n;
    const double delta = (start - ratio) - start;
    std::vector<double> v(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = roundHalfEven(start + i * delta);
    return v;
}

// The ranges of the option values themselves (checkSchedulerOptions adds the schedule's table).
void checkOptionRanges(const SchedulerOptions& o) {
    if (o.numTrainTimesteps < 1 || o.numTrainTimesteps > kMaxTrainTimesteps)
        throw ValidationError("num_train_timesteps",
                              "num_train_timesteps: " + std::to_string(o.numTrainTimesteps) +
                                  " is not allowed; it must be 1 to " + std::to_string(kMaxTrainTimesteps) +
                                  " (diffusers models use 1000; the schedule holds one entry per timestep)");
    if (o.betaSchedule != BetaSchedule::SquaredCosCapV2) {
        // beta is the variance of the noise added at one training timestep: 0 adds none (every
        // alphas_cumprod 1, a division by zero in the update), 1 destroys the signal.
        if (!(o.betaStart > 0.0f && o.betaStart < 1.0f))
            throw ValidationError(
                "beta_start",
                "beta_start: " + formatNumber(o.betaStart) +
                    " is not allowed; it must be above 0 and below 1 (diffusers models use 0.0001 to 0.00085)");
        if (!(o.betaEnd > 0.0f && o.betaEnd < 1.0f))
            throw ValidationError(
                "beta_end", "beta_end: " + formatNumber(o.betaEnd) +
                                " is not allowed; it must be above 0 and below 1 (diffusers models use 0.012 to 0.02)");
        if (!(o.betaStart <= o.betaEnd))
            throw ValidationError(
                "beta_end", "beta_end: " + formatNumber(o.betaEnd) + " is below beta_start (" +
                                formatNumber(o.betaStart) +
                                "); the noise schedule must not decrease, so beta_end must be at least beta_start");
    }
    if (o.stepsOffset < 0 || o.stepsOffset >= o.numTrainTimesteps)
        throw ValidationError("steps_offset", "steps_offset: " + std::to_string(o.stepsOffset) +
                                                  " is not allowed; it must be 0 to num_train_timesteps - 1 (" +
                                                  std::to_string(o.numTrainTimesteps - 1) + ")");
    if (o.clipSample && !(o.clipSampleRange > 0.0f && std::isfinite(o.clipSampleRange)))
        throw ValidationError(
            "clip_sample_range",
            "clip_sample_range: " + formatNumber(o.clipSampleRange) +
                " is not allowed; it must be a finite number above 0 when clip_sample is on (1 for images in [-1, 1])");
    if (!(o.eta >= 0.0f && o.eta <= 1.0f))
        throw ValidationError(
            "eta",
            "eta: " + formatNumber(o.eta) +
                " is not allowed; it must be 0 to 1 (DDIM's noise weight: 0 deterministic, 1 as much noise as DDPM)");
}

// Every alphas_cumprod in (0, 1) and strictly decreasing (float32, as the tables are stored):
// a value of 1 makes the update divide by 1 - alphas_cumprod = 0, a value of 0 (or one below
// float32's normal range, where the products stop resolving) divides by sqrt(alphas_cumprod),
// and a flat stretch makes two timesteps the same noise level.
void checkAlphasCumprod(const std::vector<float>& abar, const SchedulerOptions& o) {
    const bool cosine = o.betaSchedule == BetaSchedule::SquaredCosCapV2;
    auto refuse = [&](const std::string& field, std::size_t t, const std::string& why) {
        throw ValidationError(field, field + ": alphas_cumprod[" + std::to_string(t) + "] is " + formatNumber(abar[t]) +
                                         " (" + std::string(toString(o.betaSchedule)) + " schedule, beta_start " +
                                         formatNumber(o.betaStart) + ", beta_end " + formatNumber(o.betaEnd) +
                                         ", num_train_timesteps " + std::to_string(o.numTrainTimesteps) + "): " + why);
    };
    for (std::size_t t = 0; t < abar.size(); ++t) {
        if (!(abar[t] < 1.0f))
            refuse(cosine ? "num_train_timesteps" : "beta_start", t,
                   "1 - beta rounds to 1 in float32, so that timestep adds no noise; every alphas_cumprod must be "
                   "below 1 (beta_start at least 1e-7)");
        if (!(abar[t] >= std::numeric_limits<float>::min()))
            refuse(cosine ? "num_train_timesteps" : "beta_end", t,
                   "the signal is gone (below float32's normal range); every alphas_cumprod must be above 1.2e-38 "
                   "(lower beta_end or num_train_timesteps)");
        if (t > 0 && !(abar[t] < abar[t - 1]))
            refuse(cosine ? "num_train_timesteps" : "beta_start", t,
                   "equal to the one before it, as beta is below float32's resolution there; alphas_cumprod must "
                   "strictly decrease (raise beta_start)");
    }
}

// x0 = ax * x + ae * out for DDPM/DDIM (ᾱ_t, 1 - ᾱ_t in double).
void setX0(StepCoefficients& k, PredictionType type, double abarT, double betaT) {
    switch (type) {
        case PredictionType::Epsilon:
            k.ax = static_cast<float>(1.0 / std::sqrt(abarT));
            k.ae = static_cast<float>(-std::sqrt(betaT) / std::sqrt(abarT));
            break;
        case PredictionType::Sample:
            k.ax = 0.0f;
            k.ae = 1.0f;
            break;
        case PredictionType::VPrediction:
            k.ax = static_cast<float>(std::sqrt(abarT));
            k.ae = static_cast<float>(-std::sqrt(betaT));
            break;
    }
}

void setClip(StepCoefficients& k, const SchedulerOptions& o) {
    k.clip = o.clipSample ? 1.0f : 0.0f;
    k.clipRange = o.clipSampleRange;
}

// diffusers DDPMScheduler.step (schedulers/scheduling_ddpm.py):
// x_prev = μ(x0, x) + σ z, σ = 0 at t = 0.
class DdpmScheduler final : public Scheduler {
public:
    explicit DdpmScheduler(const SchedulerOptions& o) : Scheduler(SchedulerKind::DDPM, o) {}

    void setTimesteps(int n) override {
        const std::vector<int> ts = checkedTimesteps(n);
        std::vector<StepCoefficients> coeffs(ts.size());
        for (std::size_t k = 0; k < ts.size(); ++k) {
            const int t = ts[k];
            const int prev = k + 1 < ts.size() ? ts[k + 1] : -1;  // the next entry, -1 after the last
            const double abarT = alphasCumprod_[static_cast<std::size_t>(t)];
            const double abarP = prev >= 0 ? static_cast<double>(alphasCumprod_[static_cast<std::size_t>(prev)]) : 1.0;
            const double betaT = 1.0 - abarT, betaP = 1.0 - abarP;
            const double alphaT = abarT / abarP, betaStepT = 1.0 - alphaT;  // a'_t, β'_t

            StepCoefficients& c = coeffs[k];
            setX0(c, options_.predictionType, abarT, betaT);
            setClip(c, options_);
            c.cx0 = static_cast<float>(std::sqrt(abarP) * betaStepT / betaT);
            c.cx = static_cast<float>(std::sqrt(alphaT) * betaP / betaT);
            if (t > 0) {
                const double variance = std::max(betaP / betaT * betaStepT, 1e-20);
                c.sigma = static_cast<float>(options_.varianceType == VarianceType::FixedLarge ? std::sqrt(betaStepT)
                                                                                               : std::sqrt(variance));
            }
            c.timestep = static_cast<float>(t);
        }
        timesteps_.assign(ts.begin(), ts.end());
        coefficients_ = std::move(coeffs);
    }
};

// diffusers DDIMScheduler.step (schedulers/scheduling_ddim.py); prev = t - Tn // N whatever the
// spacing.
class DdimScheduler final : public Scheduler {
public:
    explicit DdimScheduler(const SchedulerOptions& o) : Scheduler(SchedulerKind::DDIM, o) {}

    void setTimesteps(int n) override {
        const std::vector<int> ts = checkedTimesteps(n);
        const int ratio = options_.numTrainTimesteps / n;
        const double finalAbar = options_.setAlphaToOne ? 1.0 : static_cast<double>(alphasCumprod_[0]);
        const double eta = options_.eta;
        std::vector<StepCoefficients> coeffs(ts.size());
        for (std::size_t k = 0; k < ts.size(); ++k) {
            const int t = ts[k];
            const int prev = t - ratio;
            const double abarT = alphasCumprod_[static_cast<std::size_t>(t)];
            const double abarP =
                prev >= 0 ? static_cast<double>(alphasCumprod_[static_cast<std::size_t>(prev)]) : finalAbar;
            const double betaT = 1.0 - abarT, betaP = 1.0 - abarP;

            StepCoefficients& c = coeffs[k];
            setX0(c, options_.predictionType, abarT, betaT);
            setClip(c, options_);
            // ε̂ from the unclipped prediction (use_clipped_model_output = false).
            switch (options_.predictionType) {
                case PredictionType::Epsilon:
                    c.ee = 1.0f;
                    break;
                case PredictionType::Sample:  // ε̂ = (x - √ᾱ_t · out) / √b_t
                    c.ee = static_cast<float>(-std::sqrt(abarT) / std::sqrt(betaT));
                    c.ex = static_cast<float>(1.0 / std::sqrt(betaT));
                    break;
                case PredictionType::VPrediction:  // ε̂ = √ᾱ_t · v + √b_t · x
                    c.ee = static_cast<float>(std::sqrt(abarT));
                    c.ex = static_cast<float>(std::sqrt(betaT));
                    break;
            }
            const double variance = betaP / betaT * (1.0 - abarT / abarP);
            const double stdDev = eta * std::sqrt(std::max(variance, 0.0));
            c.cx0 = static_cast<float>(std::sqrt(abarP));
            c.ceps = static_cast<float>(std::sqrt(std::max(1.0 - abarP - stdDev * stdDev, 0.0)));
            c.sigma = eta > 0.0 ? static_cast<float>(stdDev) : 0.0f;
            c.timestep = static_cast<float>(t);
        }
        timesteps_.assign(ts.begin(), ts.end());
        coefficients_ = std::move(coeffs);
    }
};

// diffusers' σ table of the training timesteps, σ_train = ((1 - ᾱ) / ᾱ) ** 0.5 in float32
// tensors, and its two lookups (Euler, Euler a and DPM++ 2M share them).
class TrainSigmas {
public:
    explicit TrainSigmas(const std::vector<float>& alphasCumprod) {
        sigma_.reserve(alphasCumprod.size());
        logSigma_.reserve(alphasCumprod.size());
        for (const float a : alphasCumprod) {
            const float s = std::sqrt((1.0f - a) / a);
            sigma_.push_back(s);
            logSigma_.push_back(std::log(s));
        }
    }

    float at(std::size_t t) const { return sigma_[t]; }
    float first() const { return sigma_.front(); }
    float last() const { return sigma_.back(); }

    // np.interp(t, arange(Tn), σ_train) in float64.
    double interp(double t) const {
        const std::size_t last = sigma_.size() - 1;
        if (!(t > 0.0)) return sigma_.front();
        if (t >= static_cast<double>(last)) return sigma_.back();
        const auto j = static_cast<std::size_t>(std::floor(t));
        const double y0 = sigma_[j], y1 = sigma_[j + 1];
        const double slope = (y1 - y0) / 1.0;
        return slope * (t - static_cast<double>(j)) + y0;
    }

    // _sigma_to_t (Euler and DPM-Solver alike): piecewise-linear in ln σ_train, clamped.
    double sigmaToT(double sigma) const {
        const double logSigma = std::log(std::max(sigma, 1e-10));
        const std::size_t count = logSigma_.size();
        if (count < 2) return 0.0;
        // low = the last index with log σ_train <= log σ (0 if none), at most count - 2.
        std::size_t low = 0;
        for (std::size_t i = 0; i < count; ++i)
            if (logSigma - static_cast<double>(logSigma_[i]) >= 0.0) low = i;
        low = std::min(low, count - 2);
        const float lowLog = logSigma_[low], highLog = logSigma_[low + 1];
        const double denominator = static_cast<float>(lowLog - highLog);  // float32 in NumPy
        double w = (static_cast<double>(lowLog) - logSigma) / denominator;
        w = std::clamp(w, 0.0, 1.0);
        return (1.0 - w) * static_cast<double>(low) + w * static_cast<double>(low + 1);
    }

private:
    std::vector<float> sigma_, logSigma_;
};

// _convert_to_karras (rho = 7) in float64: n values from sigmaMax down to sigmaMin.
std::vector<double> karrasSigmas(double sigmaMin, double sigmaMax, int n) {
    const double rho = 7.0;
    const double maxInv = std::pow(sigmaMax, 1.0 / rho), minInv = std::pow(sigmaMin, 1.0 / rho);
    const std::vector<double> ramp = numpyLinspaceFromZero(1.0, n);
    std::vector<double> sig(static_cast<std::size_t>(n));
    for (std::size_t k = 0; k < sig.size(); ++k) sig[k] = std::pow(maxInv + ramp[k] * (minInv - maxInv), rho);
    return sig;
}

// Every coefficient finite, else the step count is refused naming the step (e.g. DPM++ 2M with
// so many steps that two noise levels coincide: its step ratio h is then 0).
void checkFinite(const std::vector<StepCoefficients>& coeffs, SchedulerKind kind, int n) {
    for (std::size_t k = 0; k < coeffs.size(); ++k) {
        const StepCoefficients& c = coeffs[k];
        const float values[] = {c.ax, c.ae, c.ee, c.ex, c.e0, c.cx0, c.cx, c.ceps, c.cprev, c.sigma, c.modelInputScale};
        for (const float v : values)
            if (!std::isfinite(v))
                throw ValidationError(
                    "steps", "steps: " + std::to_string(n) + " " + std::string(toString(kind)) + " steps give step " +
                                 std::to_string(k) +
                                 " a non-finite update (two steps at the same noise level); use fewer steps");
    }
}

// diffusers EulerDiscreteScheduler and EulerAncestralDiscreteScheduler, s_churn = 0:
// x_next = x + (x - x0)/σ · (σ_target - σ) + σ_up z, with σ_target = σ_next and
// σ_up = 0 for Euler, σ_down for Euler a. x0 clipped when the model's schedule says clip_sample
// (a deliberate difference, see below).
class EulerScheduler final : public Scheduler {
public:
    EulerScheduler(SchedulerKind kind, const SchedulerOptions& o) : Scheduler(kind, o), train_(alphasCumprod_) {}

    void setTimesteps(int n) override {
        checkSteps(n);
        const bool ancestral = kind_ == SchedulerKind::EulerAncestral;
        const int tn = options_.numTrainTimesteps;
        std::vector<float> ts;
        if (options_.timestepSpacing == TimestepSpacing::Linspace) {
            const std::vector<double> y = numpyLinspaceFromZero(tn - 1, n);
            for (auto it = y.rbegin(); it != y.rend(); ++it) ts.push_back(static_cast<float>(*it));
        } else {
            // Leading adds steps_offset in float32, trailing subtracts 1: same integers as DDIM.
            const std::vector<int> ints = spacedTimesteps(tn, n, options_.timestepSpacing, options_.stepsOffset);
            ts.assign(ints.begin(), ints.end());
        }

        std::vector<double> sig(ts.size());
        for (std::size_t k = 0; k < ts.size(); ++k) sig[k] = train_.interp(ts[k]);
        if (options_.karrasSigmas && !ancestral) {
            // Over the spacing's own σ range, then t_k recovered from σ_k (_sigma_to_t).
            sig = karrasSigmas(sig.back(), sig.front(), n);
            for (std::size_t k = 0; k < sig.size(); ++k) ts[k] = static_cast<float>(train_.sigmaToT(sig[k]));
        }

        sigmas_.assign(sig.begin(), sig.end());  // float32, as diffusers stores them
        sigmas_.push_back(0.0f);                 // final_sigmas_type "zero"
        const float maxSigma = *std::max_element(sigmas_.begin(), sigmas_.end());
        initNoiseSigma_ =
            options_.timestepSpacing == TimestepSpacing::Leading ? std::sqrt(maxSigma * maxSigma + 1.0f) : maxSigma;

        std::vector<StepCoefficients> coeffs(ts.size());
        for (std::size_t k = 0; k < ts.size(); ++k) {
            StepCoefficients& c = coeffs[k];
            const double s = sigmas_[k];
            setPrediction(c, k);
            double target = sigmas_[k + 1];
            if (ancestral) {
                // σ_up, σ_down in float32 tensor arithmetic, as diffusers' step computes them.
                const float from = sigmas_[k], to = sigmas_[k + 1];
                const float up = std::sqrt(to * to * (from * from - to * to) / (from * from));
                target = std::sqrt(to * to - up * up);
                c.sigma = up;
            }
            if (c.clip != 0.0f) {
                c.cx0 = 1.0f;
                c.ceps = static_cast<float>(target);
            } else {
                c.cx = 1.0f;
                c.ceps = static_cast<float>(target - s);
            }
            c.modelInputScale = static_cast<float>(1.0 / std::sqrt(s * s + 1.0));
            c.timestep = ts[k];
        }
        checkFinite(coeffs, kind_, n);
        timesteps_ = std::move(ts);
        coefficients_ = std::move(coeffs);
    }

private:
    // x0 and the direction's noise estimate (x - x0)/σ of step k.
    void setPrediction(StepCoefficients& c, std::size_t k) const {
        const double s = sigmas_[k];
        switch (options_.predictionType) {
            case PredictionType::Epsilon:  // x0 = x - σ ε, and (x - x0)/σ is ε itself
                c.ax = 1.0f;
                c.ae = static_cast<float>(-s);
                c.ee = 1.0f;
                // The model's schedule clips x0 (pixel-space DDPMs: clip_sample true): then
                // x_next = clip(x0) + σ_target ε, which is x + (σ_target - σ) ε when nothing is
                // clipped, and is DDIM's update (clipped x0, the model's own ε) in σ form.
                // diffusers' Euler schedulers have no clip_sample: on such a model their x0
                // drifts out of [-1, 1] and the image saturates (the bundled default model went
                // pure blue; DDIM without clipping does the same). Latent models (SD) set
                // clip_sample false, where this is exactly diffusers.
                if (options_.clipSample) setClip(c, options_);
                return;
            case PredictionType::Sample:
            case PredictionType::VPrediction:
                if (!(s > 0.0))
                    throw ValidationError("prediction_type", "prediction_type: " + std::string(toString(kind_)) +
                                                                 " with '" +
                                                                 std::string(toString(options_.predictionType)) +
                                                                 "' needs sigma > 0 at every step; step " +
                                                                 std::to_string(k) + " has sigma 0 (beta_start 0?)");
                if (options_.predictionType == PredictionType::Sample) {
                    c.ax = 0.0f;
                    c.ae = 1.0f;
                } else {  // x0 = out · (-σ / √(σ²+1)) + x / (σ²+1)
                    c.ax = static_cast<float>(1.0 / (s * s + 1.0));
                    c.ae = static_cast<float>(-s / std::sqrt(s * s + 1.0));
                }
                c.ex = static_cast<float>(1.0 / s);
                c.e0 = static_cast<float>(-1.0 / s);
                return;
        }
    }

    TrainSigmas train_;
};

// diffusers DPMSolverMultistepScheduler as "DPM++ 2M" (k-diffusion sample_dpmpp_2m):
// dpmsolver++, order 2, midpoint, lower_order_final, final sigma 0. In VP form
// (α = 1/√(σ²+1), s = σα, λ = -ln σ):
// D_k = x0 of step k; x' = (s_{k+1}/s_k) x + α_{k+1}(1 - e^{-h}) D', h = λ_{k+1} - λ_k, with
// D' = D_k on first-order steps (the first step run, and the last: σ_N = 0 returns D_k) and
// D' = (1 + 1/(2 r)) D_k - 1/(2 r) D_{k-1}, r = (λ_k - λ_{k-1}) / h, otherwise.
//
// DPM++ 2M SDE (algorithm_type "sde-dpmsolver++", k-diffusion sample_dpmpp_2m_sde with eta 1,
// midpoint): the same D', with e^{-h} replaced by e^{-2h} in the x0 weight and noise added:
// x' = (s_{k+1}/s_k) e^{-h} x + α_{k+1}(1 - e^{-2h}) D' + s_{k+1} √(1 - e^{-2h}) z.
class DpmSolverScheduler final : public Scheduler {
public:
    DpmSolverScheduler(SchedulerKind kind, const SchedulerOptions& o) : Scheduler(kind, o), train_(alphasCumprod_) {}

    void setTimesteps(int n) override {
        checkSteps(n);
        std::vector<double> sig;
        std::vector<float> ts;
        if (options_.karrasSigmas) {
            // Over the whole training range (spacing plays no part); t rounded for non-cosine schedules.
            sig = karrasSigmas(train_.first(), train_.last(), n);
            for (const double s : sig) {
                const double t = train_.sigmaToT(s);
                ts.push_back(
                    static_cast<float>(options_.betaSchedule == BetaSchedule::SquaredCosCapV2 ? t : roundHalfEven(t)));
            }
        } else {
            for (const int t : timestepsFor(n)) {
                ts.push_back(static_cast<float>(t));
                sig.push_back(train_.at(static_cast<std::size_t>(t)));
            }
        }
        sigmas_.assign(sig.begin(), sig.end());
        sigmas_.push_back(0.0f);
        initNoiseSigma_ = 1.0f;
        if (kind_ == SchedulerKind::UniPC) {
            timesteps_ = std::move(ts);
            coefficients_ = uniPcCoefficients(0);
            checkFinite(coefficients_, kind_, n);
            return;
        }

        const bool sde = kind_ == SchedulerKind::DPMPP2MSDE;
        std::vector<StepCoefficients> coeffs(ts.size());
        for (std::size_t k = 0; k < ts.size(); ++k) {
            StepCoefficients& c = coeffs[k];
            const double s = sigmas_[k], sNext = sigmas_[k + 1];
            const double sd = s / std::sqrt(s * s + 1.0);
            setDataPrediction(c, s);
            if (sNext == 0.0) {  // e^{-h} = 0: x' = D
                c.cx0 = 1.0f;
            } else {
                const double alphaNext = 1.0 / std::sqrt(sNext * sNext + 1.0), sdNext = sNext * alphaNext;
                const double h = std::log(s) - std::log(sNext);
                double d = -alphaNext * std::expm1(-h);  // α_{k+1} (1 - e^{-h})
                c.cx = static_cast<float>(sdNext / sd);
                if (sde) {
                    d = -alphaNext * std::expm1(-2.0 * h);  // α_{k+1} (1 - e^{-2h})
                    c.cx = static_cast<float>(sdNext / sd * std::exp(-h));
                    c.sigma = static_cast<float>(sdNext * std::sqrt(-std::expm1(-2.0 * h)));
                }
                c.cx0 = static_cast<float>(d);
                if (k > 0 && k + 1 < ts.size()) {  // second order (lower_order_final: the last step is not)
                    const double r = (std::log(static_cast<double>(sigmas_[k - 1])) - std::log(s)) / h;
                    c.cx0 = static_cast<float>(d * (1.0 + 0.5 / r));
                    c.cprev = static_cast<float>(-d * 0.5 / r);
                }
            }
            c.timestep = ts[k];
        }
        checkFinite(coeffs, kind_, n);
        timesteps_ = std::move(ts);
        coefficients_ = std::move(coeffs);
    }

    void setBeginIndex(int begin) override {
        if (kind_ != SchedulerKind::UniPC || coefficients_.empty()) return;
        if (begin < 0 || begin > numSteps())
            throw std::out_of_range("Scheduler::setBeginIndex: " + std::to_string(begin) + " is outside [0, " +
                                    std::to_string(numSteps()) + "]");
        coefficients_ = uniPcCoefficients(begin);
    }

private:
    // D = the data prediction x0 (diffusers' convert_model_output with predict_x0) from the step's input.
    void setDataPrediction(StepCoefficients& c, double s) const {
        const double alpha = 1.0 / std::sqrt(s * s + 1.0), sd = s * alpha;
        switch (options_.predictionType) {
            case PredictionType::Epsilon:  // D = (x - s ε) / α
                c.ax = static_cast<float>(1.0 / alpha);
                c.ae = static_cast<float>(-sd / alpha);
                break;
            case PredictionType::VPrediction:  // D = α x - s v
                c.ax = static_cast<float>(alpha);
                c.ae = static_cast<float>(-sd);
                break;
            case PredictionType::Sample:
                c.ax = 0.0f;
                c.ae = 1.0f;
                break;
        }
        // As Euler: the model's clip_sample clips D (diffusers' classes have thresholding instead).
        if (options_.clipSample) setClip(c, options_);
    }

    // diffusers UniPCMultistepScheduler with its defaults (solver_order 2, bh2, predict_x0,
    // lower_order_final, the corrector on every step but the first run), the run beginning at
    // step `begin`. Step k evaluates the model at x_k (the predictor's output), corrects
    // x_k to x_k^c with that evaluation (multistep_uni_c_bh_update, from the last corrected sample
    // x_{k-1}^c, which is x_k less the last predictor's terms in the data predictions D), then
    // predicts x_{k+1} from x_k^c (multistep_uni_p_bh_update). All of it is linear in x_k, D_k,
    // D_{k-1} and D_{k-2}: D_j is kept in history buffer j mod 3 (StepUpdate.h).
    std::vector<StepCoefficients> uniPcCoefficients(int begin) const {
        const int n = numSteps();
        const auto s = [this](int j) { return static_cast<double>(sigmas_[static_cast<std::size_t>(j)]); };
        const auto alphaAt = [&](int j) { return 1.0 / std::sqrt(s(j) * s(j) + 1.0); };
        const auto sdAt = [&](int j) { return s(j) * alphaAt(j); };
        const auto lambda = [&](int j) { return -std::log(s(j)); };  // log α - log σ
        const auto thisOrder = [&](int k) {
            const int lowerOrderNums = std::min(k - begin, 2);
            return std::min(std::min(2, n - k), lowerOrderNums + 1);
        };
        // The predictor from x^c_j to x_{j+1}: {x^c, D_j, D_{j-1}} weights.
        struct Predictor {
            double xc = 0, d0 = 0, d1 = 0;
        };
        const auto predictor = [&](int j) {
            Predictor p;
            if (s(j + 1) == 0.0) {  // σ_{j+1} = 0: x_{j+1} = D_j
                p.d0 = 1.0;
                return p;
            }
            const double h = lambda(j + 1) - lambda(j), phi = std::expm1(-h), bh = phi, a = alphaAt(j + 1);
            p.xc = sdAt(j + 1) / sdAt(j);
            p.d0 = -a * phi;
            if (thisOrder(j) == 2) {  // ρ = 0.5 on D1 = (D_{j-1} - D_j) / r
                const double r = (lambda(j - 1) - lambda(j)) / h;
                p.d0 += a * bh * 0.5 / r;
                p.d1 = -a * bh * 0.5 / r;
            }
            return p;
        };
        std::vector<StepCoefficients> coeffs(static_cast<std::size_t>(n));
        for (int k = begin; k < n; ++k) {
            StepCoefficients& c = coeffs[static_cast<std::size_t>(k)];
            setDataPrediction(c, s(k));
            c.timestep = timesteps_[static_cast<std::size_t>(k)];
            // x^c_k as weights on x_k, D_k, D_{k-1}, D_{k-2}.
            double cx = 1.0, c0 = 0.0, c1 = 0.0, c2 = 0.0;
            if (k > begin) {
                const Predictor last = predictor(k - 1);
                c1 -= last.d0;  // σ_k / σ_{k-1} x^c_{k-1} = x_k - (the last predictor's D terms)
                c2 -= last.d1;
                const double h = lambda(k) - lambda(k - 1), hh = -h, phi = std::expm1(hh), bh = phi, a = alphaAt(k);
                c1 -= a * phi;
                double rhoLast = 0.5;
                if (thisOrder(k - 1) == 2) {  // rhos_c = solve(R, b), R = [[1, 1], [r, 1]]
                    const double r = (lambda(k - 2) - lambda(k - 1)) / h;
                    const double phiK0 = phi / hh - 1.0, phiK1 = phiK0 / hh - 0.5;
                    const double b1 = phiK0 / bh, b2 = phiK1 * 2.0 / bh;
                    const double rho0 = (b1 - b2) / (1.0 - r);
                    rhoLast = b1 - rho0;
                    c2 -= a * bh * rho0 / r;  // ρ0 D1, D1 = (D_{k-2} - D_{k-1}) / r
                    c1 += a * bh * rho0 / r;
                }
                c0 -= a * bh * rhoLast;  // ρ_last (D_k - D_{k-1})
                c1 += a * bh * rhoLast;
            }
            const Predictor p = predictor(k);
            c.cx = static_cast<float>(p.xc * cx);
            c.cx0 = static_cast<float>(p.xc * c0 + p.d0);
            const double w1 = p.xc * c1 + p.d1, w2 = p.xc * c2;
            c.history = 1.0f;
            if (k - 1 >= begin) c.hw[(k - 1) % kStepHistory] = static_cast<float>(w1);
            if (k - 2 >= begin) c.hw[(k - 2) % kStepHistory] = static_cast<float>(w2);
            const int mine = k % kStepHistory;  // D_k replaces D_{k-3}
            c.hKeep[mine] = 0.0f;
            c.h0[mine] = 1.0f;
        }
        return coeffs;
    }

    // This class's own spacings (not DDIM's): linspace and leading place N + 1 points and drop
    // the smallest; trailing is DDIM's.
    std::vector<int> timestepsFor(int n) const {
        const int tn = options_.numTrainTimesteps;
        std::vector<int> ts(static_cast<std::size_t>(n));
        switch (options_.timestepSpacing) {
            case TimestepSpacing::Linspace: {
                const std::vector<double> y = numpyLinspaceFromZero(tn - 1, n + 1);
                for (int k = 0; k < n; ++k)
                    ts[static_cast<std::size_t>(k)] =
                        static_cast<int>(roundHalfEven(y[static_cast<std::size_t>(n - k)]));
                break;
            }
            case TimestepSpacing::Leading: {
                const int ratio = tn / (n + 1);
                if (ratio == 0)
                    throw ValidationError(
                        "steps", "steps: " + std::to_string(n) + " is not allowed for " + std::string(toString(kind_)) +
                                     " with leading spacing; it places steps + 1 points on " + std::to_string(tn) +
                                     " timesteps, so at most " + std::to_string(tn - 1) + " steps");
                for (int k = 0; k < n; ++k) ts[static_cast<std::size_t>(k)] = (n - k) * ratio + options_.stepsOffset;
                break;
            }
            case TimestepSpacing::Trailing:
                return spacedTimesteps(tn, n, TimestepSpacing::Trailing, options_.stepsOffset);
        }
        for (const int t : ts)
            if (t < 0 || t >= tn)
                throw ValidationError("steps_offset", "steps_offset: " + std::to_string(options_.stepsOffset) +
                                                          " with " + std::to_string(n) + " " +
                                                          std::string(toString(kind_)) + " steps gives timestep " +
                                                          std::to_string(t) + ", outside [0, " +
                                                          std::to_string(tn - 1) + "]");
        return ts;
    }

    TrainSigmas train_;
};

// diffusers HeunDiscreteScheduler, LMSDiscreteScheduler (order 4) and KDPM2DiscreteScheduler:
// Euler's σ table (spacing, Karras over the spacing's range), each model evaluation one step of
// this class (diffusers' scheduler.timesteps), with D = x0 and d = (x - D)/σ at the evaluation's σ:
//   Heun  2N - 1 evaluations: at σ_i, x_mid = x + (σ_{i+1} - σ_i) d, keeping h0 = x, h1 = d; at
//         σ_{i+1} (input x_mid), x' = h0 + (σ_{i+1} - σ_i) (h1 + d) / 2. The last is Euler's to σ_N = 0.
//   DPM2  2N - 1 evaluations: at σ_i, x_mid = x + (σ_mid - σ_i) d, keeping h0 = x, with
//         σ_mid = exp((ln σ_i + ln σ_{i+1}) / 2); at σ_mid, x' = h0 + (σ_{i+1} - σ_i) d.
//   LMS   N evaluations: x' = x + Σ_j c_j d_{k-j}, j < min(k + 1, 4), c_j the integral over
//         [σ_k, σ_{k+1}] of the Lagrange basis polynomial of σ_{k-j}; d_{k-j} kept in h_{(k-j) mod 3}.
// σ table: the noise level of each evaluation's input, then 0.
class KarrasOdeScheduler final : public Scheduler {
public:
    KarrasOdeScheduler(SchedulerKind kind, const SchedulerOptions& o) : Scheduler(kind, o), train_(alphasCumprod_) {}

    int evaluationsPerStep() const override { return tessera::evaluationsPerStep(kind_); }

    void setTimesteps(int n) override {
        checkSteps(n);
        const int tn = options_.numTrainTimesteps;
        std::vector<double> ts;
        if (options_.timestepSpacing == TimestepSpacing::Linspace) {
            const std::vector<double> y = numpyLinspaceFromZero(tn - 1, n);
            for (auto it = y.rbegin(); it != y.rend(); ++it) ts.push_back(static_cast<float>(*it));
        } else {
            const std::vector<int> ints = spacedTimesteps(tn, n, options_.timestepSpacing, options_.stepsOffset);
            ts.assign(ints.begin(), ints.end());
        }
        std::vector<double> sig(ts.size());
        for (std::size_t k = 0; k < ts.size(); ++k) sig[k] = train_.interp(ts[k]);
        if (options_.karrasSigmas) {
            sig = karrasSigmas(sig.back(), sig.front(), n);
            for (std::size_t k = 0; k < sig.size(); ++k) {
                ts[k] = train_.sigmaToT(sig[k]);
                if (kind_ == SchedulerKind::DPM2) ts[k] = roundHalfEven(ts[k]);  // KDPM2 rounds, Heun and LMS do not
            }
        }
        std::vector<float> s(sig.begin(), sig.end());  // float32, as diffusers stores them
        s.push_back(0.0f);

        std::vector<StepCoefficients> coeffs;
        std::vector<float> evalTimesteps, evalSigmas;
        auto add = [&](StepCoefficients c, float sigma, double t) {
            c.modelInputScale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sigma) * sigma + 1.0));
            c.timestep = static_cast<float>(t);
            c.history = 1.0f;
            coeffs.push_back(c);
            evalTimesteps.push_back(c.timestep);
            evalSigmas.push_back(sigma);
        };
        for (int i = 0; i < n; ++i) {
            const auto u = static_cast<std::size_t>(i);
            const double si = s[u], sNext = s[u + 1];
            switch (kind_) {
                case SchedulerKind::Heun: {
                    StepCoefficients first = derivativeStep(si);
                    first.cx = 1.0f;
                    first.ceps = static_cast<float>(sNext - si);
                    keepSample(first, 0);
                    keepDerivative(first, 1, si);
                    add(first, s[u], ts[u]);
                    if (i + 1 == n) break;
                    StepCoefficients second = derivativeStep(sNext);
                    second.ceps = static_cast<float>((sNext - si) / 2.0);
                    second.hw[0] = 1.0f;
                    second.hw[1] = second.ceps;
                    add(second, s[u + 1], ts[u + 1]);
                    break;
                }
                case SchedulerKind::DPM2: {
                    const float mid = interpolatedSigma(s[u + 1], s[u]);
                    StepCoefficients first = derivativeStep(si);
                    first.cx = 1.0f;
                    first.ceps = static_cast<float>(static_cast<double>(mid) - si);
                    keepSample(first, 0);
                    add(first, s[u], ts[u]);
                    if (i + 1 == n) break;
                    StepCoefficients second = derivativeStep(mid);
                    second.ceps = static_cast<float>(sNext - si);
                    second.hw[0] = 1.0f;
                    add(second, mid, train_.sigmaToT(mid));
                    break;
                }
                case SchedulerKind::DPMPPSDE: {
                    if (sNext == 0.0) {  // the last step: Euler's to σ = 0, one evaluation
                        StepCoefficients last = derivativeStep(si);
                        last.cx = 1.0f;
                        last.ceps = static_cast<float>(-si);
                        add(last, s[u], ts[u]);
                        break;
                    }
                    // The midpoint in t = -ln σ, from the float64 σ for its timestep (as diffusers'
                    // _second_order_timesteps) and from the float32 σ for the update.
                    const double mid = std::exp(-(-std::log(si) + (std::log(si) - std::log(sNext)) * 0.5));
                    StepCoefficients first = ancestralStep(si, si, mid);
                    keepSample(first, 0);
                    add(first, s[u], ts[u]);
                    StepCoefficients second = ancestralStep(mid, si, sNext);
                    second.hw[0] = second.cx;
                    second.cx = 0.0f;
                    const double midTrain = std::sqrt(sig[u] * sig[u + 1]);
                    add(second, static_cast<float>(mid), train_.sigmaToT(midTrain));
                    break;
                }
                default: {  // LMS
                    StepCoefficients c = derivativeStep(si);
                    c.cx = 1.0f;
                    const int order = std::min(i + 1, kLmsOrder);
                    c.ceps = static_cast<float>(lmsCoefficient(s, i, order, 0));
                    for (int j = 1; j < order; ++j)
                        c.hw[(i - j) % kStepHistory] = static_cast<float>(lmsCoefficient(s, i, order, j));
                    keepDerivative(c, i % kStepHistory, si);
                    add(c, s[u], ts[u]);
                    break;
                }
            }
        }
        sigmas_ = std::move(evalSigmas);
        sigmas_.push_back(0.0f);
        const float maxSigma = *std::max_element(sigmas_.begin(), sigmas_.end());
        initNoiseSigma_ =
            options_.timestepSpacing == TimestepSpacing::Leading ? std::sqrt(maxSigma * maxSigma + 1.0f) : maxSigma;
        checkFinite(coeffs, kind_, n);
        timesteps_ = std::move(evalTimesteps);
        coefficients_ = std::move(coeffs);
    }

private:
    static constexpr int kLmsOrder = 4;

    // x0 at σ (as Euler's prediction, clipped when the model's schedule says clip_sample) and the
    // direction's noise estimate d = (x - x0)/σ as epsHat.
    StepCoefficients derivativeStep(double sigma) const {
        StepCoefficients c;
        if (!(sigma > 0.0))
            throw ValidationError("steps", "steps: " + std::string(toString(kind_)) +
                                               " needs sigma > 0 at every model evaluation (beta_start 0?)");
        switch (options_.predictionType) {
            case PredictionType::Epsilon:
                c.ax = 1.0f;
                c.ae = static_cast<float>(-sigma);
                break;
            case PredictionType::VPrediction:
                c.ax = static_cast<float>(1.0 / (sigma * sigma + 1.0));
                c.ae = static_cast<float>(-sigma / std::sqrt(sigma * sigma + 1.0));
                break;
            case PredictionType::Sample:
                c.ax = 0.0f;
                c.ae = 1.0f;
                break;
        }
        if (options_.clipSample) setClip(c, options_);
        c.ex = static_cast<float>(1.0 / sigma);
        c.e0 = static_cast<float>(-1.0 / sigma);
        return c;
    }

    // DPM++ SDE's update from σ_from towards σ_to with x0 predicted at `at` (eta 1):
    // x' = (σ_down/σ_from) x + (1 - σ_down/σ_from) x0 + σ_up z, σ_up = min(σ_to, √(σ_to²(σ_from² - σ_to²)/σ_from²)),
    // σ_down = √(σ_to² - σ_up²) (diffusers DPMSolverSDEScheduler.step, k-diffusion sample_dpmpp_sde).
    StepCoefficients ancestralStep(double at, double from, double to) const {
        StepCoefficients c = derivativeStep(at);
        c.ex = c.e0 = 0.0f;
        const double up = std::min(to, std::sqrt(to * to * (from * from - to * to) / (from * from)));
        const double down = std::sqrt(to * to - up * up);
        c.cx = static_cast<float>(down / from);
        c.cx0 = static_cast<float>(-std::expm1(std::log(down) - std::log(from)));
        c.sigma = static_cast<float>(up);
        return c;
    }

    // h_j = x (the step's start sample).
    static void keepSample(StepCoefficients& c, int j) {
        c.hKeep[j] = 0.0f;
        c.hx[j] = 1.0f;
    }
    // h_j = (x - x0) / σ (the step's derivative).
    static void keepDerivative(StepCoefficients& c, int j, double sigma) {
        c.hKeep[j] = 0.0f;
        c.hx[j] = static_cast<float>(1.0 / sigma);
        c.h0[j] = static_cast<float>(-1.0 / sigma);
    }

    // KDPM2's sigmas_interpol: sigmas.log().lerp(sigmas.roll(1).log(), 0.5).exp() in float32
    // (torch.lerp with weight 0.5: end - (end - start) * 0.5).
    static float interpolatedSigma(float sigma, float previous) {
        if (sigma == 0.0f) return 0.0f;
        const float start = std::log(sigma), end = std::log(previous);
        return std::exp(end - (end - start) * 0.5f);
    }

    // ∫_{σ_i}^{σ_{i+1}} Π_{m < order, m != j} (τ - σ_{i-m}) / (σ_{i-j} - σ_{i-m}) dτ: a polynomial
    // of degree < 4, integrated exactly by 4-point Gauss-Legendre (diffusers: scipy's quad).
    static double lmsCoefficient(const std::vector<float>& s, int i, int order, int j) {
        auto at = [&](int k) { return static_cast<double>(s[static_cast<std::size_t>(k)]); };
        auto basis = [&](double tau) {
            double prod = 1.0;
            for (int m = 0; m < order; ++m)
                if (m != j) prod *= (tau - at(i - m)) / (at(i - j) - at(i - m));
            return prod;
        };
        static constexpr double kNodes[4] = {-0.8611363115940526, -0.3399810435848563, 0.3399810435848563,
                                             0.8611363115940526};
        static constexpr double kWeights[4] = {0.3478548451374538, 0.6521451548617462, 0.6521451548617462,
                                               0.3478548451374538};
        const double a = at(i), b = at(i + 1), half = (b - a) / 2.0, middle = (a + b) / 2.0;
        double sum = 0.0;
        for (int q = 0; q < 4; ++q) sum += kWeights[q] * basis(middle + half * kNodes[q]);
        return sum * half;
    }

    TrainSigmas train_;
};

}  // namespace

std::vector<float> torchLinspace(float start, float end, int n) {
    std::vector<float> out(static_cast<std::size_t>(std::max(n, 0)));
    if (n <= 0) return out;
    if (n == 1) {
        out[0] = start;
        return out;
    }
    // Built with -std=c++20 (no GNU extensions) GCC does not contract these into FMAs,
    // so each product and sum is rounded to float32 exactly as PyTorch's scalar loop.
    const float step = (end - start) / static_cast<float>(n - 1);
    const int halfway = n / 2;
    for (int i = 0; i < n; ++i) {
        const float v = i < halfway ? start + step * static_cast<float>(i) : end - step * static_cast<float>(n - 1 - i);
        out[static_cast<std::size_t>(i)] = v;
    }
    return out;
}

void checkSchedulerOptions(const SchedulerOptions& options) {
    checkAlphasCumprod(alphasCumprodFromBetas(betaSchedule(options)), options);
}

std::vector<float> betaSchedule(const SchedulerOptions& o) {
    checkOptionRanges(o);
    const int tn = o.numTrainTimesteps;
    switch (o.betaSchedule) {
        case BetaSchedule::Linear:
            return torchLinspace(o.betaStart, o.betaEnd, tn);
        case BetaSchedule::ScaledLinear: {
            // Python takes beta ** 0.5 in double, torch.linspace then squares in float32.
            std::vector<float> b = torchLinspace(static_cast<float>(std::sqrt(static_cast<double>(o.betaStart))),
                                                 static_cast<float>(std::sqrt(static_cast<double>(o.betaEnd))), tn);
            for (float& v : b) v = v * v;
            return b;
        }
        case BetaSchedule::SquaredCosCapV2: {
            // betas_for_alpha_bar(cosine), max_beta 0.999, all in double, stored float32.
            const double pi = 3.141592653589793;
            auto alphaBar = [pi](double t) {
                const double c = std::cos((t + 0.008) / 1.008 * pi / 2);
                return c * c;
            };
            std::vector<float> b(static_cast<std::size_t>(tn));
            for (int i = 0; i < tn; ++i) {
                const double t1 = static_cast<double>(i) / tn, t2 = static_cast<double>(i + 1) / tn;
                b[static_cast<std::size_t>(i)] = static_cast<float>(std::min(1.0 - alphaBar(t2) / alphaBar(t1), 0.999));
            }
            return b;
        }
    }
    throw std::logic_error("betaSchedule: unknown BetaSchedule value");
}

std::vector<float> alphasCumprodFromBetas(const std::vector<float>& betas) {
    std::vector<float> out(betas.size());
    double product = 1.0;  // torch.cumprod's CPU accumulator for float32 is double
    for (std::size_t i = 0; i < betas.size(); ++i) {
        const float alpha = 1.0f - betas[i];
        product *= static_cast<double>(alpha);
        out[i] = static_cast<float>(product);
    }
    return out;
}

std::vector<int> spacedTimesteps(int numTrainTimesteps, int n, TimestepSpacing spacing, int stepsOffset) {
    if (n < 1 || n > numTrainTimesteps)
        throw ValidationError("steps", "steps: " + std::to_string(n) +
                                           " is not allowed; the scheduler needs between 1 and " +
                                           std::to_string(numTrainTimesteps) + " steps (num_train_timesteps)");
    std::vector<int> ts(static_cast<std::size_t>(n));
    switch (spacing) {
        case TimestepSpacing::Leading: {
            const int ratio = numTrainTimesteps / n;
            for (int k = 0; k < n; ++k) ts[static_cast<std::size_t>(k)] = (n - 1 - k) * ratio + stepsOffset;
            break;
        }
        case TimestepSpacing::Trailing: {
            const std::vector<double> v = trailingValues(numTrainTimesteps, n);
            for (int k = 0; k < n; ++k)
                ts[static_cast<std::size_t>(k)] = static_cast<int>(v[static_cast<std::size_t>(k)]) - 1;
            break;
        }
        case TimestepSpacing::Linspace: {
            const std::vector<double> y = numpyLinspaceFromZero(numTrainTimesteps - 1, n);
            for (int k = 0; k < n; ++k)
                ts[static_cast<std::size_t>(k)] =
                    static_cast<int>(roundHalfEven(y[static_cast<std::size_t>(n - 1 - k)]));
            break;
        }
    }
    for (const int t : ts)
        if (t < 0 || t >= numTrainTimesteps)
            throw ValidationError("steps_offset", "steps_offset: " + std::to_string(stepsOffset) + " with " +
                                                      std::to_string(n) + " steps gives timestep " + std::to_string(t) +
                                                      ", outside [0, " + std::to_string(numTrainTimesteps - 1) + "]");
    return ts;
}

Scheduler::Scheduler(SchedulerKind kind, const SchedulerOptions& options)
    : kind_(kind), options_(options), betas_(betaSchedule(options)), alphasCumprod_(alphasCumprodFromBetas(betas_)) {
    checkAlphasCumprod(alphasCumprod_, options_);
}

std::unique_ptr<Scheduler> Scheduler::create(SchedulerKind kind, const SchedulerOptions& options) {
    switch (kind) {
        case SchedulerKind::DDPM:
            return std::make_unique<DdpmScheduler>(options);
        case SchedulerKind::DDIM:
            return std::make_unique<DdimScheduler>(options);
        case SchedulerKind::Euler:
            return std::make_unique<EulerScheduler>(kind, options);
        case SchedulerKind::EulerAncestral:
            if (options.predictionType == PredictionType::Sample)
                throw ValidationError("prediction_type",
                                      "prediction_type: 'sample' is not allowed with the euler_a scheduler "
                                      "(diffusers' EulerAncestralDiscreteScheduler has none); use epsilon "
                                      "or v_prediction, or another scheduler");
            return std::make_unique<EulerScheduler>(kind, options);
        case SchedulerKind::DPMPP2M:
        case SchedulerKind::DPMPP2MSDE:
        case SchedulerKind::UniPC:
            return std::make_unique<DpmSolverScheduler>(kind, options);
        case SchedulerKind::DPM2:
        case SchedulerKind::DPMPPSDE:
            if (options.predictionType == PredictionType::Sample)
                throw ValidationError("prediction_type",
                                      "prediction_type: 'sample' is not allowed with the " +
                                          std::string(toString(kind)) +
                                          " scheduler (diffusers' KDPM2DiscreteScheduler and DPMSolverSDEScheduler "
                                          "have none); use epsilon or v_prediction, or another scheduler");
            return std::make_unique<KarrasOdeScheduler>(kind, options);
        case SchedulerKind::Heun:
        case SchedulerKind::LMS:
            return std::make_unique<KarrasOdeScheduler>(kind, options);
    }
    throw std::invalid_argument("Scheduler::create: unknown SchedulerKind value");
}

void Scheduler::checkSteps(int n) const {
    if (n < 1 || n > options_.numTrainTimesteps)
        throw ValidationError("steps", "steps: " + std::to_string(n) +
                                           " is not allowed; the scheduler needs between 1 and " +
                                           std::to_string(options_.numTrainTimesteps) + " steps (num_train_timesteps)");
}

void Scheduler::setTimesteps(int n) { checkSteps(n); }

std::vector<int> Scheduler::checkedTimesteps(int n) const {
    checkSteps(n);
    return spacedTimesteps(options_.numTrainTimesteps, n, options_.timestepSpacing, options_.stepsOffset);
}

StepCoefficients Scheduler::coefficients(int stepIndex) const {
    if (coefficients_.empty()) throw std::logic_error("Scheduler::coefficients: setTimesteps was not called");
    if (stepIndex < 0 || stepIndex >= numSteps())
        throw std::out_of_range("Scheduler::coefficients: step " + std::to_string(stepIndex) + " is outside [0, " +
                                std::to_string(numSteps()) + ")");
    return coefficients_[static_cast<std::size_t>(stepIndex)];
}

void Scheduler::step(int stepIndex, const float* eps, const float* x, const float* z, float* out, std::size_t n,
                     const float* x0Prev) const {
    StepCoefficients k = coefficients(stepIndex);
    if (usesHistory(k))
        throw std::logic_error("Scheduler::step: " + std::string(toString(kind_)) +
                               " keeps history buffers; use the StepHistory overload");
    if (k.sigma != 0.0f && z == nullptr)
        throw std::invalid_argument("Scheduler::step: step " + std::to_string(stepIndex) + " adds noise but z is null");
    if (x0Prev == nullptr) k = withoutPreviousX0(k);
    for (std::size_t i = 0; i < n; ++i)
        out[i] = applyStep(k, x[i], eps[i], z ? z[i] : 0.0f, k.cprev != 0.0f ? x0Prev[i] : 0.0f);
}

void Scheduler::step(int stepIndex, const float* eps, const float* x, const float* z, float* out, std::size_t n,
                     StepHistory& history) const {
    StepCoefficients k = coefficients(stepIndex);
    if (k.sigma != 0.0f && z == nullptr)
        throw std::invalid_argument("Scheduler::step: step " + std::to_string(stepIndex) + " adds noise but z is null");
    const bool started = history.x0Prev.size() == n;
    if (!started) {
        k = withoutPreviousX0(k);
        history.x0Prev.assign(n, 0.0f);
        for (std::vector<float>& h : history.h) h.assign(n, 0.0f);
    }
    for (std::size_t i = 0; i < n; ++i) {
        const float xi = x[i], e = eps[i];
        float h[kStepHistory];
        for (int j = 0; j < kStepHistory; ++j) h[j] = history.h[j][i];
        const float x0 = tessera::predictX0(k, xi, e);
        out[i] = applyStepWithHistory(k, xi, e, z ? z[i] : 0.0f, k.cprev != 0.0f ? history.x0Prev[i] : 0.0f, h);
        history.x0Prev[i] = x0;
        if (usesHistory(k))
            for (int j = 0; j < kStepHistory; ++j) history.h[j][i] = nextHistory(k, j, h[j], xi, x0);
    }
}

void Scheduler::predictX0(int stepIndex, const float* eps, const float* x, float* out, std::size_t n) const {
    const StepCoefficients k = coefficients(stepIndex);
    for (std::size_t i = 0; i < n; ++i) out[i] = tessera::predictX0(k, x[i], eps[i]);
}

float Scheduler::alphaCumprodAt(float t) const {
    if (std::isnan(t)) throw std::invalid_argument("Scheduler::alphaCumprodAt: timestep is NaN");
    const double last = static_cast<double>(alphasCumprod_.size() - 1);
    const double tc = std::clamp(static_cast<double>(t), 0.0, last);
    const double j = std::floor(tc);
    const auto i = static_cast<std::size_t>(j);
    if (tc == j) return alphasCumprod_[i];
    auto sigma = [this](std::size_t s) {
        const float a = alphasCumprod_[s];
        return static_cast<double>(std::sqrt((1.0f - a) / a));
    };
    const double s = sigma(i) + (tc - j) * (sigma(i + 1) - sigma(i));
    return static_cast<float>(1.0 / (1.0 + s * s));
}

float Scheduler::alphaCumprodForStep(int stepIndex) const {
    const StepCoefficients k = coefficients(stepIndex);  // validates the index
    if (!sigmas_.empty()) {
        const double s = sigmas_[static_cast<std::size_t>(stepIndex)];
        return static_cast<float>(1.0 / (1.0 + s * s));
    }
    return alphaCumprodAt(k.timestep);
}

Scheduler::AddNoise Scheduler::addNoise(int stepIndex) const {
    const StepCoefficients k = coefficients(stepIndex);  // validates the index
    AddNoise start;
    switch (kind_) {
        case SchedulerKind::DDPM:
        case SchedulerKind::DDIM: {
            // alphas_cumprod[t] ** 0.5 and (1 - alphas_cumprod[t]) ** 0.5 on float32 tensors.
            const float abar = alphasCumprod_[static_cast<std::size_t>(k.timestep)];
            start.image = static_cast<float>(std::sqrt(static_cast<double>(abar)));
            start.noise = static_cast<float>(std::sqrt(static_cast<double>(1.0f - abar)));
            break;
        }
        case SchedulerKind::Euler:
        case SchedulerKind::EulerAncestral:
        case SchedulerKind::Heun:
        case SchedulerKind::LMS:
        case SchedulerKind::DPM2:
        case SchedulerKind::DPMPPSDE:
            start.noise = sigmas_[static_cast<std::size_t>(stepIndex)];
            break;
        case SchedulerKind::DPMPP2M:
        case SchedulerKind::DPMPP2MSDE:
        case SchedulerKind::UniPC: {
            // _sigma_to_alpha_sigma_t on a float32 tensor.
            const float sigma = sigmas_[static_cast<std::size_t>(stepIndex)];
            start.image = 1.0f / std::sqrt(sigma * sigma + 1.0f);
            start.noise = sigma * start.image;
            break;
        }
    }
    return start;
}

// ---------------------------------------------------------------------------------------------
}  // namespace tessera
