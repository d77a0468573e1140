"""Training: `xlpe-train`'s arguments (`arguments`), data sources and features (`data`), tokenizer and model
(`model_setup`), the Trainer (`trainer`) and collator (`collator`), the run top to bottom (`run`), checkpoint
averaging, the model card and the Hub upload (`push`), and the toy demo.

Imports models, features and evaluation (the metrics it logs); never the CLI."""
