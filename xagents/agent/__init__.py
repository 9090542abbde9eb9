"""The agents' core: :class:`~xagents.agent.base.BaseAgent` and the families every algorithm subclasses,
:class:`~xagents.agent.on_policy.OnPolicy` and :class:`~xagents.agent.off_policy.OffPolicy`. (Importing this
package loads nothing: the command line reads the agents' signatures from source, without TensorFlow.)"""
