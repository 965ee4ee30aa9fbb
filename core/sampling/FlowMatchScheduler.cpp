#include "core/sampling/FlowMatchScheduler.h"

#include <cmath>
#include <vector>

namespace tessera {

double FlowMatchOptions::mu() const {
    const double m = (maxShift - baseShift) / (maxImageSeqLen - baseImageSeqLen);
    const double b = baseShift - m * baseImageSeqLen;
    return imageSeqLen * m + b;
}

namespace {

class FlowMatchEulerScheduler final : public Scheduler {
public:
    explicit FlowMatchEulerScheduler(const FlowMatchOptions& o)
        : Scheduler(SchedulerKind::Euler, SchedulerOptions{}), flow_(o) {}

    void setTimesteps(int n) override {
        checkSteps(n);
        // The pipelines' np.linspace(1.0, 1 / n, n), stored float32 by set_timesteps, then shifted
        // in float32 as NumPy computes time_shift on a float32 array (the Python scalars weak).
        const float e = static_cast<float>(std::exp(flow_.mu()));
        sigmas_.clear();
        timesteps_.clear();
        for (int k = 0; k < n; ++k) {
            const double lin = n == 1 ? 1.0 : 1.0 + (1.0 / n - 1.0) * k / (n - 1);
            const float s = static_cast<float>(lin);
            float shifted;
            if (flow_.dynamicShift)
                shifted = e / (e + (1.0f / s - 1.0f));
            else
                shifted = flow_.shift * s / (1.0f + (flow_.shift - 1.0f) * s);
            sigmas_.push_back(shifted);
            timesteps_.push_back(shifted * static_cast<float>(options_.numTrainTimesteps));
        }
        sigmas_.push_back(0.0f);
        initNoiseSigma_ = 1.0f;
        coefficients_.assign(static_cast<std::size_t>(n), StepCoefficients{});
        for (int k = 0; k < n; ++k) {
            StepCoefficients& c = coefficients_[static_cast<std::size_t>(k)];
            const float sigma = sigmas_[static_cast<std::size_t>(k)];
            c.ax = 1.0f;
            c.ae = -sigma;
            c.ee = 1.0f;  // the direction is the velocity itself
            c.cx = 1.0f;
            c.ceps = sigmas_[static_cast<std::size_t>(k) + 1] - sigma;  // dt, float32 as step()
            c.timestep = timesteps_[static_cast<std::size_t>(k)];
        }
    }

    AddNoise addNoise(int stepIndex) const override {
        (void)coefficients(stepIndex);  // validates the index
        const float sigma = sigmas_[static_cast<std::size_t>(stepIndex)];
        return AddNoise{1.0f - sigma, sigma};
    }

private:
    FlowMatchOptions flow_;
};

}  // namespace

std::unique_ptr<Scheduler> createFlowMatchScheduler(const FlowMatchOptions& options) {
    return std::make_unique<FlowMatchEulerScheduler>(options);
}

}  // namespace tessera
