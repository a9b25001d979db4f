"""Training the embedded model pair (`draftverify train-pair`): corpus, tokenizer, transformer
target and draft, n-gram drafter, measurements and the model card. Import the submodules
directly; this package does not import torch or transformers on its own."""
