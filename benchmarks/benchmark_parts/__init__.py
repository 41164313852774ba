"""The parts of benchmarks/benchmark.py, one module per thing it measures, each readable on its own:

- common.py: the two models with the same sizes and weights (fairseq's built-in and ours), the
  batches both get, and the turns they take;
- training.py: training tokens/s and model FLOP/s (MFU), both models in turns step by step;
- memory.py: training peak memory, one fresh process per model;
- generation.py: beam-4 sentences/s and identical hypotheses, with the CTranslate2 export;
- profile.py: where a step's time goes (--profile), by kind of work, under torch.profiler;
- processes.py: running a measurement in a fresh process, its failure as one line; running
  commands in turn within a budget, each under a time limit (gpu_levers.py, cli_train.py);
- report.py: the table that benchmarks/benchmark.py prints;
- data_bin.py: a synthetic data-bin for the benchmarks that run fairseq's own commands
  (cli_train.py, cli_generate.py).

benchmarks/benchmark.py is the entry point (its flags, its table, its JSON); these modules import
torch, fairseq and attn_only_plugin inside their functions, so that --help stays fast.
"""
