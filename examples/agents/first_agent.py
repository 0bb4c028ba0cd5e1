"""my-first-agent as a real process (docs/runtime.md): the tutorial's deterministic agent written
with the A2A SDK, whose memory is memory.json in its durable directory. Its code is
sessionq.agentkit.first_agent (src/sessionq/agentkit/first_agent.py), so that the process runtime
can run it for an Agent that names no command; this file runs the same agent:

    command: [/path/to/python, /path/to/examples/agents/first_agent.py]
"""

from sessionq.agentkit.first_agent import main

if __name__ == "__main__":
    main()
