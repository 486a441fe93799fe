"""Stands in for torch_memory_saver: slime looks for the preload library beside it, and
its trainer module imports the singleton (which offloads GPU memory; never called here)."""


class TorchMemorySaver:
    """The type of torch_memory_saver's singleton; nothing here touches a GPU."""


torch_memory_saver = TorchMemorySaver()
