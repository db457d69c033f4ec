/**
 * `mcp-store auth <service> [--agent <id>] [--open]`: authorizes an OAuth-protected upstream from a
 * terminal, against a running store over its HTTP API: asks authorize_service for the URL, prints
 * it (opens a browser with `--open`), then waits (wait_service) until the store's callback has
 * finished the flow and the service is healthy. With `--mine` (a `per_user.oauth` service), the key's
 * own authorization instead: POST .../credentials/<service>/authorize, then GET .../credentials/<service>
 * every second until it says authorized. Nothing secret passes through it: the code goes from the
 * browser to the store's /oauth/callback. When the browser cannot reach that callback, `--code` and
 * `--state` (and `--iss`, which an authorization server that sends it requires: RFC 9207) paste
 * what the address it was sent back to holds, and finish the flow the same way.
 */
import { setTimeout as sleep } from "node:timers/promises"
import { Command } from "commander"
import { parseArguments, storeClient, withStoreOptions } from "./subcommand.js"

/** Where the command writes, and how it opens a browser (tests give their own). */
export interface AuthCommandIo {
  readonly writeOut?: (text: string) => void
  readonly writeErr?: (text: string) => void
  readonly openBrowser?: (url: string) => Promise<void>
}

/** How long the command waits for the authorization, in seconds (wait_service's own cap is 600). */
const WAIT_SECONDS = 600

/** Runs the command; resolves with the exit code. */
export const runAuth = async (argv: ReadonlyArray<string>, env: NodeJS.ProcessEnv, io: AuthCommandIo = {}): Promise<number> => {
  const out = io.writeOut ?? ((text: string) => process.stdout.write(text))
  const err = io.writeErr ?? ((text: string) => process.stderr.write(text))
  const program = withStoreOptions(new Command("mcp-store auth"))
    .description("authorize an OAuth-protected upstream service of a running store")
    .argument("<service>", "the service's name")
    .option("--agent <id>", "the agent whose service it is (default: the store's)")
    .option("--open", "open the authorization URL in a browser")
    .option("--mine", "authorize the service for your own key only (a service with per_user.oauth)")
    .option("--code <code>", "paste-the-code: the code of the address the browser was sent back to (with --state)")
    .option("--state <state>", "paste-the-code: the state that came with the code")
    .option("--iss <issuer>", "paste-the-code: the iss that came with the code, when there is one (RFC 9207)")
    .option("--timeout <seconds>", `how long to wait for the authorization (default: ${WAIT_SECONDS})`)
    .exitOverride()
    .configureOutput({ writeOut: out, writeErr: err, outputError: () => undefined })
  const parsed = await parseArguments(program, argv, err, "mcp-store auth")
  if (parsed !== undefined) return parsed
  const service = program.args[0] as string
  const options = program.opts<{ agent?: string; open?: boolean; mine?: boolean; url?: string; apiKey?: string; timeout?: string; code?: string; state?: string; iss?: string }>()
  if ((options.code === undefined) !== (options.state === undefined) || (options.iss !== undefined && options.code === undefined)) {
    err("mcp-store auth: give --code and --state together (and --iss with them), or none of them\n")
    return 2
  }
  const pasted = options.code !== undefined ? { code: options.code, state: options.state, ...(options.iss !== undefined ? { iss: options.iss } : {}) } : {}
  const { base, request } = storeClient(options, env)
  const prefix = options.agent !== undefined ? `/for_agent/${encodeURIComponent(options.agent)}` : "/for_store"
  const timeout = Number(options.timeout ?? WAIT_SECONDS)
  // Number() takes "", " " and "0x10": only a plain number of seconds is.
  if (options.timeout !== undefined && (!/^\s*\d+(\.\d+)?\s*$/.test(options.timeout) || timeout <= 0 || timeout > WAIT_SECONDS)) {
    err(`mcp-store auth: --timeout must be a number of seconds above 0 and at most ${WAIT_SECONDS}\n`)
    return 2
  }
  // wait_service answers within its own time-out: the request may take that long, and a little more.
  const post = (path: string, body: unknown, timeoutMs?: number) => request("POST", `${prefix}${path}`, body, timeoutMs)
  try {
    const own = `/credentials/${encodeURIComponent(service)}`
    const started = options.mine === true ? await post(`${own}/authorize`, pasted) : await post("/authorize_service", { service_name: service, ...pasted })
    if (started.status !== 200) {
      // A refused field (a pasted code without the iss its authorization server sends) is named with its problem.
      const fields = (started.body["error"] as { details?: { fields?: Array<{ field?: string; problem?: string }> } } | undefined)?.details?.fields ?? []
      err(`mcp-store auth: ${[String(started.body["message"] ?? `HTTP ${started.status}`), ...fields.map((f) => `${f.field ?? ""}: ${f.problem ?? ""}`)].join("\n  ")}\n`)
      return 1
    }
    if (options.mine === true && options.code !== undefined) {
      out(`${service}: authorized for your key\n`)
      return 0
    }
    const url = started.body["authorization_url"]
    if (typeof url !== "string") {
      out(`${service}: authorized\n`)
      return 0
    }
    // The store's callback asks before it finishes a key's own authorization (and one an agent's key started).
    const asks = options.mine === true ? `The store's page then asks whose account it is: answer "Connect my account".\n` : `If the store's page then asks whose account it is, answer "Connect my account".\n`
    out(`Open this URL to authorize ${service}:\n\n  ${url}\n\n${asks}Waiting for the authorization...\n`)
    if (options.open === true) {
      const opener = io.openBrowser ?? (async (u: string) => void (await (await import("open")).default(u)))
      await opener(url).catch(() => err("could not open a browser: open the URL by hand\n"))
    }
    if (options.mine === true) {
      // The store's callback finishes it: its status is asked every second until then (each request has its own time-out).
      for (const end = Date.now() + timeout * 1000; Date.now() < end; await sleep(1_000)) {
        const status = await request("GET", `${prefix}${own}`)
        if (status.status === 200 && (status.body["oauth"] as { authorized?: unknown } | undefined)?.authorized === true) {
          out(`${service}: authorized for your key\n`)
          return 0
        }
      }
      err(`mcp-store auth: ${service} is not authorized for your key after ${timeout} s\n`)
      return 1
    }
    const waited = await post("/wait_service", { client_id_or_service_name: service, status: "healthy", timeout }, (timeout + 10) * 1000)
    const data = waited.body["data"] as { result?: unknown; final_status?: unknown } | undefined
    if (waited.status === 200 && data?.result === true) {
      out(`${service}: authorized and healthy\n`)
      return 0
    }
    err(`mcp-store auth: ${service} is ${String(data?.final_status ?? "not healthy")} after ${timeout} s: ${String(waited.body["message"] ?? "")}\n`)
    return 1
  } catch (e) {
    err(`mcp-store auth: the store at ${base} cannot be reached: ${e instanceof Error ? e.message : String(e)}\n`)
    return 1
  }
}
