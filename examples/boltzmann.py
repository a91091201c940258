"""Boltzmann populations of a quantum harmonic oscillator's levels over a range of temperatures.

p_i(T) = exp(-E_i / kT) / sum_j exp(-E_j / kT) is a softmax of -E / kT over the levels. The mean
energy from it matches the closed form  <E> = hw/2 + hw / (exp(hw / kT) - 1)  for the infinite
ladder (the ladder here is long enough for the missing tail to be negligible).

    python examples/boltzmann.py
"""

import numpy as np

import cusoftmax

try:
    import cupy as xp

    xp.cuda.runtime.getDeviceCount()
except Exception:  # no GPU: the same code on the host
    xp = np

hw = 1.0  # level spacing (units of energy)
levels = xp.arange(20_000, dtype=xp.float64)
energy = hw * (levels + 0.5)
kT = xp.exp(xp.linspace(np.log(0.05), np.log(500.0), 64))[:, None]  # 64 temperatures, one row each

p = cusoftmax.softmax(-energy[None, :] / kT, axis=1)  # (64, 20000) populations
mean_e = (p * energy).sum(axis=1)
exact = hw / 2 + hw / xp.expm1(hw / kT[:, 0])
rel = float(xp.abs(mean_e / exact - 1).max())
print(f"{'GPU' if xp is not np else 'host'}: mean energy for 64 temperatures, "
      f"max relative error vs closed form {rel:.2e}")
for t, e in list(zip(kT[::16, 0].tolist(), mean_e[::16].tolist())):
    print(f"  kT = {t:8.3f}   <E> = {e:10.4f}")
assert rel < 1e-10
