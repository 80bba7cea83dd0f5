"""GKR (Goldwasser, Kalai, Rothblum 2008) for layered binary-tree circuits, with an
oracle gate layer.

The circuit. The input layer V_0 holds N = 2^m values; layer l applies ops[l-1] ("add"
or "mul") to neighbouring pairs, V_l(g) = op(V_{l-1}(2g), V_{l-1}(2g + 1)), halving the
width, so L layers leave 2^{m-L} outputs (one, the aggregate, when L = m). With the
big-endian index convention of `polynomials` the pair (2g, 2g+1) is (g, 0), (g, 1), and

  V~_l(z) = sum_{g in {0,1}^k} eq(z, g) op(W(g, 0), W(g, 1))          (k = m - l)

for any low-degree extension W of V_{l-1} (both sides are multilinear in z and agree
on the cube). Each layer is one sum-check of degree 2 (add) or 3 (mul) in each
variable; at its end (point r) the prover sends a = W(r, 0), b = W(r, 1), the verifier
checks eq(z, r) op(a, b) against the sum-check's last value and reduces the two claims
to one on the line through them: z' = (r, r*), claim a + r* (b - a). The wiring's
extension is the closed form eq(z, g), so the verifier works O(k d) per layer, O(m^2)
in all: polylogarithmic in the circuit size, while the prover folds tables in time
linear in it (Thaler 2013, "Time-optimal interactive proofs for circuit evaluation").

The input. Given a table, the verifier evaluates its multilinear extension at the last
point itself (O(N): it reads the input). Given a low-degree oracle O of degree d per
variable (oracle gates: the inputs are O's answers on the cube), the bottom layer's
sum-check is run on eq(z, g) op(O(g, 0), O(g, 1)) directly (degree 1 + d or 1 + 2d),
and the verifier checks the prover's two claimed oracle answers with two direct
queries at field points, after a line low-degree test of O: no step reads N values.
"""

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from methods.interactive_proofs import oracles
from methods.interactive_proofs import polynomials as poly
from methods.interactive_proofs import provers
from methods.interactive_proofs import sumcheck
from methods.interactive_proofs.field import PrimeField

OPS = ("add", "mul")
# Reason codes of `check`: layer l's sum-check (0..L-1 from the top) fails -> l; the
# layer-end check fails -> L + l; the input check fails -> 2 L.
ACCEPT = sumcheck.ACCEPT


class Oracle(NamedTuple):
  """A low-degree oracle: fn maps points (P, m) to (P,), degree <= d per variable."""
  fn: Callable
  num_vars: int
  degree: int


class LayerMessages(NamedTuple):
  messages: jax.Array  # (k, D + 1): the layer's sum-check rounds
  a: jax.Array  # claimed W(r, 0)
  b: jax.Array  # claimed W(r, 1)


class Transcript(NamedTuple):
  output: jax.Array  # (2^{m-L},) the claimed outputs
  layers: tuple  # LayerMessages per layer, top first


class Coins(NamedTuple):
  z: jax.Array  # (m - L,) the point on the output layer
  r: tuple  # per layer (top first): the sum-check challenges (k,)
  line: jax.Array  # (L,) the r* of each layer's line reduction
  test: jax.Array  # a key for the oracle's low-degree test


def check_circuit(ops, num_inputs: int) -> int:
  """Returns m = log2(num_inputs); raises one line for unknown ops or too many layers."""
  if num_inputs < 1 or num_inputs & (num_inputs - 1):
    raise ValueError(f"the input layer needs 2^m values, got {num_inputs}")
  m = num_inputs.bit_length() - 1
  bad = [op for op in ops if op not in OPS]
  if bad:
    raise ValueError(f"gate ops must be in {OPS}, got {bad}")
  if not 1 <= len(ops) <= m:
    raise ValueError(f"{len(ops)} layers on 2^{m} inputs: need 1 <= layers <= {m}")
  return m


def apply_op(F: PrimeField, op: str, a, b):
  return F.add(a, b) if op == "add" else F.mul(a, b)


def evaluate(F: PrimeField, ops, inputs):
  """All layers [V_0, V_1, ..., V_L] of the circuit on a table of inputs."""
  layers = [inputs]
  for op in ops:
    layers.append(apply_op(F, op, layers[-1][0::2], layers[-1][1::2]))
  return layers


def layer_degree(op: str, oracle_degree: Optional[int] = None) -> int:
  """The sum-check degree of a layer: eq (1) times op of two multilinear (or degree-d
  oracle) factors."""
  d = 1 if oracle_degree is None else oracle_degree
  return 1 + (d if op == "add" else 2 * d)


def draw_coins(F: PrimeField, key, ops, m: int) -> Coins:
  L = len(ops)
  keys = jax.random.split(key, L + 3)
  r = tuple(F.random(keys[j], (m - L + j,)) for j in range(L))
  return Coins(F.random(keys[L], (m - L,)), r, F.random(keys[L + 1], (L,)), keys[L + 2])


def _table_prover(F, op, z, below):
  """The layer's `ProductSum` prover and the layer-end values (a, b) = (W(r, 0), W(r, 1)),
  read from its folded tables after the last round (each table's MLE at r)."""
  left, right = below[0::2], below[1::2]
  eq = poly.eq_table(F, z)
  if op == "add":
    st = sumcheck.ProductSum(jnp.stack([jnp.stack([eq, left]), jnp.stack([eq, right])]),
                             jnp.ones((2,), jnp.int64))
    ends = lambda final, r: (final.tables[0, 1, 0], final.tables[1, 1, 0])
  else:
    st = sumcheck.ProductSum(jnp.stack([eq, left, right])[None], jnp.ones((1,), jnp.int64))
    ends = lambda final, r: (final.tables[0, 1, 0], final.tables[0, 2, 0])
  return sumcheck.TableProver.create(F, st, layer_degree(op)), ends


def _oracle_points(points, bit):
  return jnp.concatenate([points, jnp.full(points.shape[:-1] + (1,), bit, points.dtype)], -1)


def _oracle_prover(F, op, z, oracle: Oracle):
  def h(points):
    a, b = oracle.fn(_oracle_points(points, 0)), oracle.fn(_oracle_points(points, 1))
    return F.mul(poly.eq_eval(F, z[None], points), apply_op(F, op, a, b))

  prover = sumcheck.OracleProver.create(F, h, z.shape[0], layer_degree(op, oracle.degree))
  ends = lambda final, r: tuple(oracle.fn(_oracle_points(r[None], bit))[0] for bit in (0, 1))
  return prover, ends


def prove(F: PrimeField, ops, coins: Coins, inputs=None, oracle: Optional[Oracle] = None,
          cheat: bool = False) -> Transcript:
  """The prover's side of a run on the verifier's coins (each coin used only after
  the message it answers). `cheat=True`: claims output[0] + 1 and, layer by layer,
  lies optimally in each sum-check and sends layer-end values consistent with its
  claim (`provers.Cheater`), so only the input check can catch it."""
  values = evaluate(F, ops, inputs if oracle is None else
                    oracle.fn(sumcheck.cube(oracle.num_vars)))
  output = values[-1].at[0].add(1) % F.p if cheat else values[-1]
  z, claim, layers = coins.z, poly.mle_eval(F, output, coins.z), []
  for j, op in enumerate(reversed(ops)):
    l = len(ops) - j
    if l == 1 and oracle is not None:
      honest, ends = _oracle_prover(F, op, z, oracle)
    else:
      honest, ends = _table_prover(F, op, z, values[l - 1])
    prover = provers.Cheater.create(F, honest, claim, "optimal") if cheat else honest
    final, messages = sumcheck.rounds(prover, coins.r[j])
    a, b = ends(final.honest if cheat else final, coins.r[j])
    if cheat:
      a, b = _consistent(F, op, poly.eq_eval(F, z, coins.r[j]), final.held, a, b)
    layers.append(LayerMessages(messages, a, b))
    z = jnp.concatenate([coins.r[j], coins.line[j:j + 1]])
    claim = F.add(a, F.mul(coins.line[j], F.sub(b, a)))
  return Transcript(output, tuple(layers))


def _consistent(F, op, eq, held, a, b):
  """Layer-end values (a, b') with eq op(a, b') = held: b' solves the one equation."""
  target = F.div(held, eq)
  b_new = F.sub(target, a) if op == "add" else F.div(target, a)
  return a, b_new


def check(F: PrimeField, ops, transcript: Transcript, coins: Coins, inputs=None,
          oracle: Optional[Oracle] = None, test_lines: int = 1):
  """The verifier (jit/vmap-able on a well-formed transcript).

  Returns:
    (accept, reason) with the reason codes above. With an oracle the verifier makes
    2 + test_lines (m d + 2) oracle queries and O(m^2 d) field operations.
  """
  L = len(ops)
  z, claim = coins.z, poly.mle_eval(F, transcript.output, coins.z)
  reasons = []
  for j, op in enumerate(reversed(ops)):
    msg = transcript.layers[j]
    final = F.mul(poly.eq_eval(F, z, coins.r[j]), apply_op(F, op, msg.a, msg.b))
    last = _last_value(F, claim, msg.messages, coins.r[j])
    # The round sums (with the last round's value as its own end) and the layer end.
    sums_ok, _ = sumcheck.check_rounds(
        F, sumcheck.Transcript(claim, msg.messages, coins.r[j]), coins.r[j], last)
    reasons += [~sums_ok, sums_ok & (last != final)]
    z = jnp.concatenate([coins.r[j], coins.line[j:j + 1]])
    claim = F.add(msg.a, F.mul(coins.line[j], F.sub(msg.b, msg.a)))
  reasons.append(~_input_ok(F, transcript, coins, claim, z, inputs, oracle, test_lines))
  failed = jnp.stack(reasons)  # ordered: layer 0 sums, layer 0 end, layer 1 ..., input
  code_of = jnp.asarray([v for j in range(L) for v in (j, L + j)] + [2 * L])
  accept = ~jnp.any(failed)
  return accept, jnp.where(accept, ACCEPT, code_of[jnp.argmax(failed)])


def _last_value(F, claim, messages, challenges):
  if messages.shape[0] == 0:
    return claim
  return poly.lagrange_eval(F, messages[-1], challenges[-1])


def _input_ok(F, transcript, coins, claim, z, inputs, oracle, test_lines):
  if oracle is None:
    return poly.mle_eval(F, inputs, z) == claim
  bottom = transcript.layers[-1]
  r = coins.r[-1]
  a = oracle.fn(_oracle_points(r[None], 0))[0]
  b = oracle.fn(_oracle_points(r[None], 1))[0]
  low_degree = oracles.line_test(F, oracle.fn, oracle.num_vars,
                                 oracle.num_vars * oracle.degree, coins.test, test_lines)
  return (a == bottom.a) & (b == bottom.b) & low_degree


def verifier_queries(oracle: Oracle, test_lines: int = 1) -> int:
  """Oracle queries of one verification: two answers plus the line test's points."""
  return 2 + test_lines * (oracle.num_vars * oracle.degree + 2)


def _shape_problem(F: PrimeField, ops, transcript, m: int, oracle_degree: Optional[int]):
  """A one-line reason why `transcript` is not a well-formed GKR transcript, or None."""
  L = len(ops)
  top = max(layer_degree(op, oracle_degree if j == L - 1 else None)
            for j, op in enumerate(reversed(ops)))
  if top >= F.p:
    return (f"the verifier cannot check it: degree-{top} rounds need {top + 1} distinct "
            f"points, but F_{F.p} has {F.p}")
  try:
    output, layers = np.asarray(transcript.output), tuple(transcript.layers)
  except (AttributeError, TypeError, ValueError) as e:
    return f"the transcript is not (output, layers): {e}"
  if output.shape != (2**(m - L),):
    return f"output has shape {output.shape}, expected ({2**(m - L)},)"
  if len(layers) != L:
    return f"{len(layers)} layer messages for a circuit of {L} layers"
  for j, op in enumerate(reversed(ops)):
    try:
      messages, a, b = (np.asarray(x) for x in layers[j])
    except (TypeError, ValueError) as e:
      return f"layer {j} (from the top) is not (messages, a, b): {e}"
    degree = layer_degree(op, oracle_degree if j == L - 1 else None)
    want = (m - L + j, degree + 1)
    if messages.shape != want or a.shape != () or b.shape != ():
      return (f"layer {j} (from the top) has messages {messages.shape}, a {a.shape}, "
              f"b {b.shape}; expected {want}, (), ()")
  for x in (output,) + tuple(np.asarray(v) for layer in layers for v in layer):
    if x.dtype.kind not in "iu" or np.any((x < 0) | (x >= F.p)):
      return f"a value is not an element of F_{F.p}"
  return None


# One compiled program per circuit, oracle and shape, instead of dispatching its ops
# one by one (the oracle, a NamedTuple of a function and two ints, is hashable).
_check_jit = jax.jit(check, static_argnums=(0, 1, 5, 6))


def verify(F: PrimeField, ops, transcript, coins: Coins, inputs=None,
           oracle: Optional[Oracle] = None, test_lines: int = 1) -> tuple:
  """The verifier on any transcript handed to it: never raises on malformed input.

  Returns:
    (accepted, reason): a bool and a one-line reason.
  """
  m = int(np.log2(inputs.shape[0])) if oracle is None else oracle.num_vars
  problem = _shape_problem(F, ops, transcript, m, None if oracle is None else oracle.degree)
  if problem:
    return False, f"rejected: {problem}"
  t = Transcript(jnp.asarray(transcript.output, jnp.int64), tuple(
      LayerMessages(*(jnp.asarray(x, jnp.int64) for x in layer)) for layer in transcript.layers))
  accept, reason = _check_jit(F, tuple(ops), t, coins, inputs, oracle, test_lines)
  if bool(accept):
    return True, "accepted"
  L, reason = len(ops), int(reason)
  if reason == 2 * L:
    return False, "rejected: the input check failed (the bottom claim or the oracle)"
  kind = "sum-check round" if reason < L else "layer-end value"
  return False, f"rejected: a {kind} check failed in layer {reason % L} (from the top)"
