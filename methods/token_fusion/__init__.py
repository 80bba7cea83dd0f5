"""1D-token image fusion with Selective Token Editing (ICML 2026).

A TiTok-style 1D tokenizer (`tokenizer`: K latent tokens, lookup-free quantisation)
is trained once on photos and frozen; it carries the fused image's global appearance
(the base layer) beside a 2D fusion backbone that carries local detail (`fusion`: the
CNN, the unsupervised fusion objective, the base/detail split). Selective Token
Editing (`ste`) adds a learned offset to a few probed token positions, Z~ = Z + M * Delta;
`model` joins the pieces. `metrics` holds the field's fusion metrics (EN, SD, SF, MI,
SCD, VIF, Qabf, SSIM, PSNR), `baselines` Laplacian-pyramid and wavelet fusion,
`training` the batch functions. See docs/token_fusion.md.
"""

from methods.token_fusion import baselines
from methods.token_fusion import fusion
from methods.token_fusion import metrics
from methods.token_fusion import model
from methods.token_fusion import ste
from methods.token_fusion import tokenizer
from methods.token_fusion import training
from methods.token_fusion.fusion import BackboneConfig, LossWeights
from methods.token_fusion.model import Frozen, FusionSpec, fuse
from methods.token_fusion.ste import EditorConfig
from methods.token_fusion.tokenizer import TokenizerConfig
