/**
 * `mcp-store pins show|accept <service> [tool...] [--agent <id>]` (docs/tool-pins.md): an operator's
 * view of a running store's held tools, over its HTTP API: `show` prints each held tool with what
 * changed (get_service_info's `held_tools`), `accept` accepts them (all, or the tools named) with
 * accept_tool_changes and prints what it accepted and what is still held. Every request has a time-out.
 */
import { Command } from "commander"
import { parseArguments, storeClient, withStoreOptions } from "./subcommand.js"

/** Where the command writes (tests give their own). */
export interface PinsCommandIo {
  readonly writeOut?: (text: string) => void
  readonly writeErr?: (text: string) => void
}

/** How long one request to the store may take (an accept waits for the service to list its tools again). */
const REQUEST_TIMEOUT_MS = 30_000

interface HeldTool {
  readonly name: string
  readonly change: string
  readonly changed_fields: ReadonlyArray<string>
  readonly diff: Readonly<Record<string, { readonly before: string | null; readonly after: string | null }>>
}

/** A held tool as lines of text: its name and change, then each changed field's old and new text. */
const describeHeld = (t: HeldTool): string => {
  const lines = [`${t.name}: ${t.change === "new" ? "new tool" : "changed"} (${t.changed_fields.join(", ")})`]
  for (const [field, d] of Object.entries(t.diff)) {
    lines.push(`  ${field}:`, `    - ${d.before ?? "(absent)"}`, `    + ${d.after ?? "(absent)"}`)
  }
  return lines.join("\n")
}

/** Runs the command; resolves with the exit code. */
export const runPins = async (argv: ReadonlyArray<string>, env: NodeJS.ProcessEnv, io: PinsCommandIo = {}): Promise<number> => {
  const out = io.writeOut ?? ((text: string) => process.stdout.write(text))
  const err = io.writeErr ?? ((text: string) => process.stderr.write(text))
  const program = withStoreOptions(new Command("mcp-store pins"))
    .description("show or accept the held tools of a service of a running store (pinned tool definitions)")
    .argument("<action>", "show | accept")
    .argument("<service>", "the service's name")
    .argument("[tools...]", "accept: the tools to accept (original or callable names; default: every held tool)")
    .option("--agent <id>", "the agent whose service it is (default: the store's)")
    .exitOverride()
    .configureOutput({ writeOut: out, writeErr: err, outputError: () => undefined })
  const parsed = await parseArguments(program, argv, err, "mcp-store pins")
  if (parsed !== undefined) return parsed
  const [action, service, ...tools] = program.args as [string, string, ...string[]]
  if (action !== "show" && action !== "accept") {
    err(`mcp-store pins: unknown action '${action}' (show or accept)\n`)
    return 2
  }
  if (action === "show" && tools.length > 0) {
    err("mcp-store pins: show takes no tool names\n")
    return 2
  }
  const options = program.opts<{ agent?: string; url?: string; apiKey?: string }>()
  const client = storeClient(options, env)
  const base = client.base
  const prefix = options.agent !== undefined ? `/for_agent/${encodeURIComponent(options.agent)}` : "/for_store"
  const request = (method: "GET" | "POST", path: string, body?: unknown) => client.request(method, `${prefix}${path}`, body, REQUEST_TIMEOUT_MS)
  try {
    if (action === "show") {
      const info = await request("GET", `/get_service_info?name=${encodeURIComponent(service)}`)
      if (info.status !== 200) {
        err(`mcp-store pins: ${String(info.body["message"] ?? `HTTP ${info.status}`)}\n`)
        return 1
      }
      const held = (info.body["held_tools"] ?? []) as ReadonlyArray<HeldTool>
      out(held.length === 0 ? `${service}: no held tool\n` : `${held.map(describeHeld).join("\n")}\n`)
      return 0
    }
    const accepted = await request("POST", "/accept_tool_changes", { service_name: service, ...(tools.length > 0 ? { tools } : {}) })
    if (accepted.status !== 200) {
      err(`mcp-store pins: ${String(accepted.body["message"] ?? `HTTP ${accepted.status}`)}\n`)
      return 1
    }
    const list = (v: unknown) => ((v as ReadonlyArray<string> | undefined) ?? []).join(", ") || "none"
    out(`${service}: accepted ${list(accepted.body["accepted"])}; still held: ${list(accepted.body["still_held"])}\n`)
    return 0
  } catch (e) {
    err(`mcp-store pins: the store at ${base} cannot be reached: ${e instanceof Error ? e.message : String(e)}\n`)
    return 1
  }
}
