"""Studies at scale: a grid runner on Dask with a Parquet result store, and the studies it runs.

- grids (``fa4num/study/grids/*.toml``, shipped as package data, or any .toml file): a study function and its parameter axes, one task per configuration
  (:func:`load_grid`, :func:`list_grids`);
- :func:`run_grid`: computes the tasks a result directory does not hold yet, on a Dask LocalCluster
  (default), any Dask scheduler, or in-process (``scheduler="none"``), one Parquet row per task
  (:func:`read_store`; checksummed parts, safe for concurrent clients and crashes, :func:`verify_store`);
- studies (:data:`STUDIES`): ``skip_rate`` (FA4 SM100's lazy rescale from per-(row, KV block) maxima of S, any
  length, GPU through torch when present) and ``error_budget`` (output/LSE error of each FA4 knob vs fp64);
- :mod:`fa4num.study.summary`: confidence intervals over seeds, tables and figures; :mod:`.baselines`: the
  H200 kernel comparison (FA4, cuDNN, SDPA flash/efficient/math vs fp64).

Only numpy is imported with the package; torch, pandas, pyarrow and dask when a function needs them.
"""
from .grid import Grid, config_key, list_grids, load_grid, parse_grid
from .runner import RunSummary, run_grid
from .skip import (KernelRows, LazyRescaleScan, block_maxima, lazy_rescale_scan, lazy_rescale_scans, scale_log2,
                   sm100_rows)
from .store import CorruptStoreError, read_store, verify_store
from .studies import STUDIES, error_budget, skip_rate

__all__ = ["Grid", "load_grid", "list_grids", "parse_grid", "config_key", "run_grid", "RunSummary",
           "read_store", "verify_store", "CorruptStoreError", "STUDIES", "skip_rate", "error_budget",
           "block_maxima", "lazy_rescale_scan", "lazy_rescale_scans", "LazyRescaleScan", "KernelRows", "sm100_rows",
           "scale_log2"]
