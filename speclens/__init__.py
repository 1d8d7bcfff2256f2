"""The foundation: errors, config schemas, record and summary types, file formats, metrics and
cost definitions, redaction and cache paths. Imports nothing of the project."""
