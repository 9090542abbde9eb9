from xagents.a2c.agent import A2C
