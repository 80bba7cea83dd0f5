"""Plots of each experiment: `experiments/plots/<name>.py`, pure functions from measured
results to PNG files saved with `common.plotting.save_figure`."""
