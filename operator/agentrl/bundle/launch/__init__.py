"""The RayJob entrypoint (`python -m agentrl.bundle.launch`): runs once, before slime.

Pure logic lives in `cuda` (CUDA pinning, libcudart and torch_memory_saver checks) and
`command` (slime's argv and config files); `probe` runs things in the image; `preflight`
checks paths and data; `main` ties them together and execs slime's train.py.
"""
