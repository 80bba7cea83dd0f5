"""FGR: Frequency-aware Gradient Rectification for calibration under distribution shift
(ICML 2026; public code YilinZhang107/FGR-Calib).

A target-agnostic training recipe in three parts:

1. Low-pass views (`filters`): each epoch a fraction rho = 5% of the training images is
   replaced by a low-pass view, the JPEG round trip at quality 25 / 18 / 15 (default)
   or an FFT Gaussian mask exp(-|f|^2 / (2 (R / 1.5)^2)), R = min(H, W) r / 2, so the
   network leans less on high-frequency cues that shift between domains.
2. The main loss on the mixed batch, the dual focal loss (`losses`)
       L_main = -mean (1 - p_y + max_{k != y} p_k)^gamma log p_y,   gamma = 5,
   and the ID calibration objective on the batch's clean images, SoftBinnedECE
       L_cal = (sum_b m_b / N |acc_b - conf_b|^2)^(1/2),  15 soft bins, T = 0.1.
3. ID calibration as a hard constraint (`rectify`): with g_m = grad L_main and
   g_c = grad L_cal, a conflicting main step (<g_m, g_c> < 0) is projected,
       g = g_m - (<g_m, g_c> / |g_c|^2) g_c,
   so the step -eta g does not increase L_cal to first order, with no weight between
   the two losses. By default on the classifier head, globally over its leaves;
   `fgr_rectify` is the optax transformation (g_c as the extra argument
   `constraint_grads`), then clipping at global norm 2 and SGD as in the code.

FGR starts after a warm-up (epoch 200 of 350 in the code; learning rate 0.1, divided by
10 at epochs 150 and 250) and is compatible with post-hoc temperature scaling
(`metrics.fit_temperature`). `metrics` has the ECE family, NLL, Brier and accuracy;
`baselines` the losses and PCGrad it is compared against. The corruption suite for the
shifted test sets lives in `common.data.corruptions`, the CIFAR(-C) loaders in
`common.data.cifar`. See docs/fgr.md.
"""

from methods.fgr import baselines, filters, losses, metrics, rectify
from methods.fgr.filters import (FFT_RATIOS, FILTERS, JPEG_QUALITIES, apply_views,
                                 epoch_selection, fft_lowpass, filter_images,
                                 gaussian_lowpass_mask, jpeg_filter, lowpass_views,
                                 make_filter, nyquist_radius)
from methods.fgr.losses import (classification_loss, cross_entropy, dual_focal_loss,
                                focal_loss, label_smoothing_loss, mixup,
                                soft_binned_calibration_error, soft_binned_ece,
                                soft_cross_entropy)
from methods.fgr.metrics import (accuracy, adaptive_ece, brier_score, calibration_metrics,
                                 classwise_ece, ece, fit_temperature, nll)
from methods.fgr.rectify import (FGRState, RectifyInfo, fgr_rectify, pcgrad, pcgrad_rectify,
                                 rectify_grads, value_and_two_grads)

__all__ = [
    "FFT_RATIOS", "FGRState", "FILTERS", "JPEG_QUALITIES", "RectifyInfo", "accuracy",
    "adaptive_ece", "apply_views", "baselines", "brier_score", "calibration_metrics",
    "classification_loss", "classwise_ece", "cross_entropy", "dual_focal_loss", "ece",
    "epoch_selection", "fft_lowpass", "fgr_rectify", "filter_images", "filters",
    "fit_temperature", "focal_loss", "gaussian_lowpass_mask", "jpeg_filter",
    "label_smoothing_loss", "losses", "lowpass_views", "make_filter", "metrics", "mixup",
    "nll", "nyquist_radius", "pcgrad", "pcgrad_rectify", "rectify", "rectify_grads",
    "soft_binned_calibration_error", "soft_binned_ece", "soft_cross_entropy",
    "value_and_two_grads",
]
