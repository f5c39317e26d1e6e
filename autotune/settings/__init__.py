"""Settings: one config of every knob, the DataLoader it builds, and the code that builds it.

The bottom of the stages: every other stage describes a config with :class:`Settings`."""
