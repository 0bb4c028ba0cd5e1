"""Generated code; run scripts/gen_proto.py"""
