"""Corpus preparation that needs no fairseq: the LibreOffice help parallel corpus."""
