"""Framework integrations: tuned settings for a Hugging Face ``Trainer`` or a Lightning
``Trainer``, and (for Hugging Face) a search built from an existing trainer.

The frameworks are optional extras, so nothing here is imported by ``import autotune``;
import the module for yours explicitly::

    from autotune.integrations import hf          # pip install 'autotune[hf]'
    from autotune.integrations import lightning   # pip install 'autotune[lightning]'

Importing one without its framework raises :class:`autotune.MissingExtraError`,
saying what to install.
"""

__all__: list[str] = []  # each framework's module (hf, lightning) is imported by name
