"""Exact prime-field arithmetic F_p in JAX.

Elements are int64 words in [0, p) with p < 2^31, so a sum of two elements fits in 32
bits and a product in 62: every operation is one integer op and one reduction, exact,
jit- and vmap-able. int64 needs jax's 64-bit mode (`jax.enable_x64(True)` or
`jax.config.update("jax_enable_x64", True)`); without it jax would silently truncate to
int32, so every entry point checks the mode and raises one line.

Example:
  >>> with jax.enable_x64(True):
  ...   F = PrimeField(2**31 - 1)
  ...   F.mul(F.inv(F.element(3)), F.element(3))
  Array(1, dtype=int64)
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

MAX_BITS = 31  # p < 2^31: a + b < 2^32 and a * b < 2^62 fit an int64 word.
MERSENNE_31 = 2**31 - 1
POW_UNROLL_BITS = 8  # `pow` unrolls exponents up to this many bits, loops over longer.


def is_prime(n: int) -> bool:
  """Deterministic Miller-Rabin, exact for n < 3.3e24 (bases 2..41)."""
  if n < 2:
    return False
  small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
  if n in small:
    return True
  if any(n % q == 0 for q in small):
    return False
  d, s = n - 1, 0
  while d % 2 == 0:
    d, s = d // 2, s + 1
  for a in small:
    x = pow(a, d, n)
    if x in (1, n - 1):
      continue
    for _ in range(s - 1):
      x = x * x % n
      if x == n - 1:
        break
    else:
      return False
  return True


def require_x64():
  if not jax.config.jax_enable_x64:
    raise ValueError("prime-field arithmetic needs 64-bit words: enable jax's x64 mode "
                     "(jax.enable_x64(True) or jax.config.update('jax_enable_x64', True))")


@dataclasses.dataclass(frozen=True)
class PrimeField:
  """The field F_p of integers modulo a prime p < 2^31 (hashable: a static argument).

  Raises:
    ValueError: p is not an integer, not prime, or not below 2^31.
  """
  p: int

  def __post_init__(self):
    if isinstance(self.p, bool) or not isinstance(self.p, (int, np.integer)):
      raise ValueError(f"p must be an integer prime below 2^{MAX_BITS}, got {self.p!r}")
    if not 2 <= self.p < 2**MAX_BITS:
      raise ValueError(f"p={self.p} is too large for the word size: the field needs "
                       f"2 <= p < 2^{MAX_BITS} so products fit 62 bits")
    if not is_prime(int(self.p)):
      raise ValueError(f"p={self.p} is not prime, so Z/pZ is not a field")
    object.__setattr__(self, "p", int(self.p))

  @property
  def size(self) -> int:
    return self.p

  def element(self, x) -> jax.Array:
    """Integers (Python ints of any size, integer numpy or jax arrays) reduced into [0, p).

    Raises:
      ValueError: x holds a non-integer (2.5, 2.0, True): it names no field element,
        and rounding it would silently change the statement.
    """
    require_x64()
    if isinstance(x, jax.Array):
      if not jnp.issubdtype(x.dtype, jnp.integer):
        raise ValueError(f"F_{self.p} elements are integers, got a {x.dtype} array")
      return jnp.mod(x.astype(jnp.int64), self.p)
    arr = np.asarray(x)
    if arr.dtype.kind == "u":
      return jnp.asarray((arr.astype(np.uint64) % np.uint64(self.p)).astype(np.int64))
    if arr.dtype.kind == "i":
      return jnp.asarray(arr.astype(np.int64) % np.int64(self.p))
    arr = np.asarray(x, dtype=object)
    for v in arr.flat:
      if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"F_{self.p} elements are integers, got {v!r} ({type(v).__name__})")
    return jnp.asarray(np.asarray(arr % self.p, dtype=np.int64), dtype=jnp.int64)

  def random(self, key, shape=()) -> jax.Array:
    """Uniform elements of F_p."""
    require_x64()
    return jax.random.randint(key, shape, 0, self.p, dtype=jnp.int64)

  def add(self, a, b):
    s = a + b
    return jnp.where(s >= self.p, s - self.p, s)

  def sub(self, a, b):
    d = a - b
    return jnp.where(d < 0, d + self.p, d)

  def neg(self, a):
    return jnp.where(a == 0, a, self.p - a)

  def mul(self, a, b):
    return self.reduce(a * b)

  def reduce(self, x):
    """x mod p for 0 <= x < 2^62. For the Mersenne prime p = 2^31 - 1, by folding
    (2^31 = 1 mod p: x = hi 2^31 + lo = hi + lo) instead of an integer division."""
    x = jnp.asarray(x)
    if self.p != MERSENNE_31:
      return jax.lax.rem(x, jnp.asarray(self.p, x.dtype))  # x >= 0: rem is mod, one op
    x = (x & self.p) + (x >> 31)  # < 2^32
    x = (x & self.p) + (x >> 31)  # <= p + 1
    return jnp.where(x >= self.p, x - self.p, x)

  def sum(self, a, axis=None):
    """Sum mod p; exact for up to 2^32 terms per reduction (each term < 2^31)."""
    s = jnp.sum(a, axis=axis)
    return jax.lax.rem(s, jnp.asarray(self.p, s.dtype))  # s >= 0: rem is mod, one op

  def prod(self, a, axis=0):
    """Product mod p along `axis`, by a binary tree of multiplications."""
    a = jnp.moveaxis(a, axis, 0)
    if a.shape[0] == 0:
      return jnp.ones(a.shape[1:], a.dtype)
    while a.shape[0] > 1:
      if a.shape[0] % 2:
        a = jnp.concatenate([a, jnp.ones_like(a[:1])])
      a = self.mul(a[0::2], a[1::2])
    return a[0]

  def dot(self, a, b, axis=-1):
    """Multiply-accumulate sum_i a_i b_i mod p (each product reduced before the sum)."""
    return self.sum(self.mul(a, b), axis=axis)

  def pow(self, a, e: int):
    """a^e for a static exponent e >= 0, by square-and-multiply: unrolled for short
    exponents, a loop over e's bits for long ones (inv's e = p - 2: up to 31), the same
    products in a program of one step instead of up to 2 log2(e) multiplications."""
    if e < 0:
      raise ValueError(f"exponent must be >= 0, got {e}")
    e = int(e)
    if e.bit_length() > POW_UNROLL_BITS:
      return _pow_by_bits(self, jnp.asarray(a), e)
    result = jnp.ones_like(a)
    base = a
    while e:
      if e & 1:
        result = self.mul(result, base)
      e >>= 1
      if e:
        base = self.mul(base, base)
    return result

  def inv(self, a):
    """a^{-1} = a^{p-2} (Fermat); 0 maps to 0, which has no inverse. In F_2 (p - 2 = 0,
    where a^0 would map 0 to 1) every element is its own inverse."""
    if self.p == 2:
      return jnp.asarray(a)
    return self.pow(a, self.p - 2)

  def div(self, a, b):
    return self.mul(a, self.inv(b))

  def inv_int(self, x: int) -> int:
    """The inverse of a nonzero Python integer, in Python (for static constants)."""
    if x % self.p == 0:
      raise ValueError(f"{x} is 0 mod p={self.p} and has no inverse")
    return pow(int(x), self.p - 2, self.p)


@functools.partial(jax.jit, static_argnums=(0, 2))
def _pow_by_bits(F: PrimeField, a, e: int):
  """a^e by square-and-multiply as a loop over the bits of e, least significant first
  (jitted, so an eager call compiles once per field, exponent and shape)."""
  bits = jnp.asarray([(e >> i) & 1 for i in range(e.bit_length())], bool)

  def step(i, carry):
    result, base = carry
    return jnp.where(bits[i], F.mul(result, base), result), F.mul(base, base)

  return jax.lax.fori_loop(0, e.bit_length(), step, (jnp.ones_like(a), a))[0]
