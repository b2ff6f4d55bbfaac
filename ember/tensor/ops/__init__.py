"""The tensor op families, one mixin each."""
