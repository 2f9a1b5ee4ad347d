"""The Kafka page-views example needs no code of its own: its window is declared in pipeline.yaml."""
