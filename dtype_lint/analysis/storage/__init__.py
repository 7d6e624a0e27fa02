"""The storage model: what each backend leaves in `.weight`, the layer an expression holds, platforms, catalogues."""
