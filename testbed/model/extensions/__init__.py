"""What the pure model takes from outside: code loaded by name, run under a deadline,
or compiled.

plugins         where a scheduler key comes from: built-in, entry point or `module:Class`
network_models  what times a KV transfer in the flow engine: built-in models or plugins
guard           a scheduler nobody here wrote, run so its failures become records
compiled_cache  the decode instances' prefix caches compiled (model/native/prefix_cache.cc)
"""
