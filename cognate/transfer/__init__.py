"""Transfer of a cost model across targets: config mapper, autoencoders, fine-tuning."""
