"""The torch runtime that the transformers engine (search.engines.hf) and model-based scorers
(rewards.prm: HF PRMs) share: how a model's KV cache lives over a search tree, how its forward
runs fast on CPU, and how many searches' forwards merge into one. Every module is public; a
scorer that runs a model imports them from here, never from an engine's folder.

  kvtree.py     a model's KV segments over search trees (computed once while kept)
  kvstore.py    those segments as a cache: a byte cap, least recently used out, pinned while read
  kv.py         segments and the batch caches of a forward (in-place slab, shared prefix)
  attention.py  grouped-query and cascade attention over those caches (off the kernel)
  kernel.py     the CPU's attention: one C++ call a layer for every Pass (attend.cpp)
  packed.py     oneDNN-prepacked linear layers (fp32 on CPU)
  lean.py       Llama-family forward in fewer ops, over the slab cache
  scripted.py   its layers in TorchScript, run without the interpreter lock
  dtypes.py     weight dtypes: names, the int8 path, native bf16
  passes.py     a job's forwards (Pass) and how a tick's Passes merge into one forward a model
  sched.py      the owner lanes of the models: many searches' jobs, one batched forward a tick
  sampling.py   token sampling (greedy, temperature, top-p), batched across calls
  omp.py        one OpenMP thread team at a time; torch's CPU threads, per thread
  transfer.py   small host values to and from the device without stalling it

Importing this package loads nothing (torch loads with the first module imported).
"""
