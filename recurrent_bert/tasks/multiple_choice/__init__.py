"""Multiple choice: SWAG's CSVs, choice JSONL and HellaSwag through TFDS.
`adapter.MultipleChoiceAdapter` is what `finetune_multiple_choice` trains; the models'
kind "multiple_choice".
"""
