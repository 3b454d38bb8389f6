//! Host escalation: the agent asks, the developer decides (docs/escalation.md).
//! `broker`: rules, prompts, records, timeouts, key material; `adversarial`:
//! typeahead, drawn prompts, bursts, forged records, a killed coordinator;
//! `prompt`: what is approved is exactly what runs, where the prompt says.
pub mod adversarial;
pub mod broker;
pub mod prompt;
