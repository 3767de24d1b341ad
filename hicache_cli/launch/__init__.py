"""Launch side: the hicache process starting torchrun or a traced program, following its
ranks' samples, stopping them, and writing the report. No rendering here."""
