"""The commands run as a user runs them (fresh processes, real files): fine-tuning, export,
pretraining, README and docs as written, the wheel. `make test-fast` leaves most out."""
