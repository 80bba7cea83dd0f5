"""Single-prover interactive proofs for oracle-aided computations (ICML 2026: "how to
avoid debate").

Instead of two provers debating before a weak verifier, one untrusted prover convinces
a verifier that does far less work than the computation, including when the
computation queries an oracle (a human, a model, a database), in two settings:

1. The oracle is a low-degree polynomial (`oracles`): the verifier may query it at any
   point of F^m, so GKR (`gkr`) runs its bottom sum-check on the oracle itself and the
   verifier checks the prover's two oracle claims with two queries after a line
   low-degree test: polylog(N) verifier work and O(log N) oracle calls.
2. The computation is robust, its output unchanged by delta N wrong answers
   (`spot_check`): the verifier checks k random claimed answers; a prover that lies on
   more than delta N items survives with probability < (1 - delta)^k.

The machinery is exact arithmetic in F_p, p < 2^31, on int64 words (`field`; jax x64
mode), multilinear extensions and univariate round polynomials (`polynomials`), the
sum-check protocol with linear-time provers (`sumcheck`; soundness n d / |F| on the
verifier's own coins, or Fiat-Shamir challenges), cheating provers (`provers`), and a
model as the oracle (`judges`: the library's LM judging text windows). Everything is jit- and vmap-able, so 10^5 protocol runs are one program
(`simulation`: one run on a random statement as a pure function of a key). See
docs/interactive_proofs.md.
"""

from methods.interactive_proofs import field, gkr, judges, oracles, polynomials, provers
from methods.interactive_proofs import simulation, spot_check, sumcheck
from methods.interactive_proofs.field import PrimeField

__all__ = ["PrimeField", "field", "gkr", "judges", "oracles", "polynomials", "provers",
           "simulation", "spot_check", "sumcheck"]
