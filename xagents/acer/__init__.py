from xagents.acer.agent import ACER
