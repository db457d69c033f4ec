/**
 * The handlers the store and agent groups share (add_service, call_tool, use_tool, wait_service):
 * decode is done by the contract, so each one calls a store operation and shapes the answer.
 */
import { Effect } from "effect"
import type { ScopeApi } from "../runtime/store.js"
import { toolErrorMessage } from "../runtime/store.js"
import { run, waitTimeout } from "./errors.js"
import type { Schema } from "effect"
import type { CallToolPayload, WaitPayload } from "./schemas.js"

export const addService = (scope: () => ScopeApi, payload: unknown, wait: number | undefined) =>
  run(async () => {
    const result = await scope().addService(payload, wait !== undefined ? { waitSeconds: wait } : {})
    const parts = [
      result.added.length > 0 ? `added ${result.added.join(", ")}` : "",
      result.updated.length > 0 ? `updated ${result.updated.join(", ")}` : "",
      result.unchanged.length > 0 ? `unchanged ${result.unchanged.join(", ")}` : ""
    ].filter((p) => p !== "")
    return { success: true, message: `Services ${parts.join("; ")}`, ...result }
  })

export const callTool = (scope: () => ScopeApi, payload: Schema.Schema.Type<typeof CallToolPayload>) =>
  run(async (signal) => {
    const output = await scope().callTool(payload, signal)
    return {
      success: !output.is_error,
      message: output.is_error ? toolErrorMessage(output) : `Tool '${output.tool_name}' called`,
      ...output
    }
  })

export const waitService = (
  scope: () => ScopeApi,
  payload: Schema.Schema.Type<typeof WaitPayload>,
  context: { readonly context: "store" } | { readonly context: "agent"; readonly agent_id: string }
) =>
  Effect.flatMap(
    run(async (signal) =>
      scope().waitService(
        {
          client_id_or_service_name: payload.client_id_or_service_name,
          status: payload.status as never,
          timeout: payload.timeout
        },
        signal
      )
    ),
    (outcome) => {
      const data = {
        client_id_or_service_name: payload.client_id_or_service_name,
        target_status: payload.status,
        timeout: payload.timeout,
        result: outcome.result,
        final_status: outcome.final_status,
        elapsed_ms: outcome.elapsed_ms,
        ...context
      }
      const timedOut = !outcome.result && outcome.final_status !== "deleted"
      const message = outcome.result
        ? "Service wait completed: success"
        : outcome.final_status === "deleted"
          ? "Service wait completed: service deleted"
          : "Service wait completed: timeout"
      if (timedOut && payload.raise_on_timeout) return Effect.fail(waitTimeout(message, data))
      return Effect.succeed({ success: outcome.result, message, data })
    }
  )
