"""Transfer of a cost model across targets: config mapper, autoencoders, fine-tuning."""


def register() -> None:
    """Register what transfer adds to the model package: the autoencoder config encoder
    ("ae") and the fine-tuned model's checkpoint loader (metadata section "transfer").
    Whatever loads models calls it; the model package never imports transfer."""
    from cognate.transfer import autoencoder, finetune  # noqa: F401 - they register on import
