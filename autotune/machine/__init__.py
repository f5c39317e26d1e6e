"""The machine: CPUs, memory and GPUs (through NVML), its fingerprint, and the monitor
that samples what the devices do during a probe. Every machine fact lives here."""
