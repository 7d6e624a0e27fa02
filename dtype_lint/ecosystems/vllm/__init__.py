"""The vLLM ecosystem: the storage-model catalogues of vLLM releases a project imports without
containing them (catalogue-*.json, written by scripts/catalogue.py)."""
