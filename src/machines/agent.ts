/**
 * The agent machine: a supervisor that owns one agent's service actors. It spawns a child per
 * added service, stops it on removal, and survives a child's crash by restarting it with backoff
 * (src/machines/supervisor.ts), so one failing service never takes its siblings down.
 */
import { assign, setup, stopChild, type ActorRefFrom, type AnyEventObject } from "xstate"
import { dict } from "../domain/dict.js"
import { agentScope } from "../domain/service-definition.js"
import type { MonitoringSettings } from "../domain/settings.js"
import { serviceMachine } from "./service.js"
import {
  ownEntry,
  crashReport,
  releaseCrashed,
  restartCrashed,
  withSpawnedService,
  withoutService,
  type CrashReport,
  type SupervisorContext,
  type SupervisorEvent
} from "./supervisor.js"

export interface AgentInput {
  readonly agentId: string
  readonly settings: MonitoringSettings
}

export interface AgentContext extends SupervisorContext {
  readonly agentId: string
}

export const agentMachine = setup({
  types: {
    context: {} as AgentContext,
    events: {} as SupervisorEvent,
    input: {} as AgentInput
  },
  actors: { service: serviceMachine },
  actions: {
    releaseCrashed: ({ context, event }) => releaseCrashed(context, event),
    /** Tells the operator of a service actor's crash (supplied by the runtime; nothing by default). */
    reportCrash: (_, _report: CrashReport | undefined) => undefined
  }
}).createMachine({
  id: "agent",
  context: ({ input }) => ({
    agentId: input.agentId,
    scope: agentScope(input.agentId),
    settings: input.settings,
    services: dict(),
    crashes: dict()
  }),
  initial: "supervising",
  states: {
    supervising: {
      on: {
        ADD_SERVICE: {
          guard: ({ context, event }) => ownEntry(context.services, event.name) === undefined,
          actions: assign({
            services: ({ context, event, spawn }) => withSpawnedService(context, spawn, event.name, event.definition)
          })
        },
        REMOVE_SERVICE: {
          guard: ({ context, event }) => ownEntry(context.services, event.name) !== undefined,
          actions: [
            stopChild(({ context, event }) => ownEntry(context.services, event.name)!),
            assign({ services: ({ context, event }) => withoutService(context.services, event.name) })
          ]
        },
        "xstate.error.actor.*": {
          actions: [
            "releaseCrashed",
            { type: "reportCrash", params: ({ context, event }: { context: SupervisorContext; event: AnyEventObject }) => crashReport(context, event) },
            assign(({ context, event, spawn }) => restartCrashed(context as AgentContext, spawn, event))
          ]
        }
      }
    }
  }
})

export type AgentActorRef = ActorRefFrom<typeof agentMachine>
