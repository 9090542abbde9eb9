from xagents.trpo.agent import TRPO
