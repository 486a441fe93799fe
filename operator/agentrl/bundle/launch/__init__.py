"""The RayJob entrypoint (`python -m agentrl.bundle.launch`): runs once, before slime.

Pure logic lives in `cuda` (CUDA pinning, libcudart and torch_memory_saver checks) and
`argcheck` (flags the image's slime does not define); slime's argv and files come from
`agentrl.slimecmd`. `probe` runs things in the image; `preflight` checks paths and data and
reads the checkpoint directory; `main` ties them together and execs slime's train.py.
"""
