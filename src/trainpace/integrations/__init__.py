"""Front-ends that meter training without a hand-written loop: ``trainpace run`` (auto-patching)
and the Lightning and Hugging Face callbacks. Each framework is an optional extra, imported
lazily by its own module."""
