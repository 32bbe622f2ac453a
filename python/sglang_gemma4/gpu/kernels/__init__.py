"""Kernel benches and tuners: one kernel on Gemma-4 shapes, timed on this GPU without a server
(attention tiles, routing, the fused-MoE configs). They use nothing of checks/ or studies/; of
serve/ only the shapes and presets a tuner must publish."""
