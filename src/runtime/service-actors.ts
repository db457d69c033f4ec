/**
 * The look-ups of service and agent actors under the store's root actor, as functions of the root:
 * the store and the parts that reach the actors (upstream OAuth tells a service's actor) share them.
 */
import { dict } from "../domain/dict.js"
import { STORE_SCOPE, agentScope, type Scope } from "../domain/service-definition.js"
import type { AgentActorRef } from "../machines/agent.js"
import type { StoreActorRef } from "../machines/root.js"
import type { ServiceActorRef } from "../machines/service.js"
import { ownEntry } from "../machines/supervisor.js"

/** The services of an agent that has none (a frozen null-prototype record, like the machines' own). */
const NO_SERVICES: Readonly<Record<string, ServiceActorRef>> = Object.freeze(dict<ServiceActorRef>())

/** The agent actor of an agent, if it has any service. */
export const agentActorOf = (root: StoreActorRef, agentId: string): AgentActorRef | undefined => ownEntry(root.getSnapshot().context.agents, agentId)

/** Ids of the agents that have services. */
export const agentIdsOf = (root: StoreActorRef): ReadonlyArray<string> => Object.keys(root.getSnapshot().context.agents)

/** The service actors of a scope, by name (a null-prototype record). */
export const serviceActorsOf = (root: StoreActorRef, scope: Scope): Readonly<Record<string, ServiceActorRef>> => {
  if (scope.kind === "store") return root.getSnapshot().context.services
  return agentActorOf(root, scope.agentId)?.getSnapshot().context.services ?? NO_SERVICES
}

/** The service actor of a name in a scope, if registered. */
export const serviceActorOf = (root: StoreActorRef, scope: Scope, name: string): ServiceActorRef | undefined => ownEntry(serviceActorsOf(root, scope), name)

/** Every service actor of every scope. */
export const allServiceActorsOf = (root: StoreActorRef): ReadonlyArray<ServiceActorRef> => {
  const out = [...Object.values(serviceActorsOf(root, STORE_SCOPE))]
  for (const id of agentIdsOf(root)) out.push(...Object.values(serviceActorsOf(root, agentScope(id))))
  return out
}
