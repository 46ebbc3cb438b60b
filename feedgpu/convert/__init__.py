"""The shard engine every converter uses: planning shards, the one function that writes and
commits a shard, the run (resume, report, progress), the local process pool and the Beam runner.

A converter (in `feedgpu.converters`) lists its source and says how one shard's bytes are made;
everything about files appearing atomically, resuming and reporting lives here.
"""
