"""The web dashboard, served by the API process at ``/ui/``."""
