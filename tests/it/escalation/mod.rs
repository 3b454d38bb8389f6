//! Host escalation: the agent asks, the developer decides (docs/escalation.md).
//! `broker`: rules, prompts, records, timeouts, key material; `adversarial`:
//! typeahead, drawn prompts, bursts, forged records, a killed coordinator;
//! `prompt`: what is approved is exactly what runs, where the prompt says;
//! `rules`: what a rule may name, and the trailing arguments it grants;
//! `ssh_agent`: the sandbox's SSH agent (issue 51); `ssh_agent_push`: `git
//! push` over SSH through it to a test server; `ssh_agent_forged`: forged,
//! replayed and other sessions' agent records.
pub mod adversarial;
pub mod broker;
pub mod prompt;
pub mod rules;
pub mod ssh_agent;
pub mod ssh_agent_forged;
pub mod ssh_agent_push;
