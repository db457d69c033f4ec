/**
 * What the subcommands share: parsing their arguments with commander without letting it exit the
 * process (a usage error is exit code 2, help 0), running the action chosen with the exit codes of
 * the file-editing commands (a file that cannot be read or written is 1), and the bounded HTTP client
 * of the commands that talk to a running store (`--url`, `--api-key`).
 */
import { resolve as resolvePath } from "node:path"
import { type Command, CommanderError } from "commander"

/** Raised by an action for a usage error it finds itself (exit code 2). */
export class UsageError extends Error {
  override readonly name = "UsageError"
}

/**
 * The services file a subcommand works beside: `--config`, else MCPSTORE_CONFIG (or
 * MCPSTORE_MCP_CONFIG_FILE), else ./mcp.json. An empty `--config` is refused (it would name the
 * directory, and the files land beside it).
 */
export const servicesFileOf = (config: unknown, env: NodeJS.ProcessEnv, cwd: string): string => {
  if (typeof config === "string" && config.trim() === "") throw new UsageError("--config must be the path of a file")
  const given = typeof config === "string" ? config : [env["MCPSTORE_CONFIG"], env["MCPSTORE_MCP_CONFIG_FILE"]].find((v) => v !== undefined && v !== "")
  return resolvePath(cwd, given ?? "mcp.json")
}

/**
 * Whether commander stopped for help that was asked for (`--help`, `help`): exit 0. Help it shows
 * on its own (a command with subcommands given none) is a usage error.
 */
export const helpAsked = (e: CommanderError): boolean =>
  e.code === "commander.helpDisplayed" || (e.code === "commander.help" && e.exitCode === 0)

/**
 * Parses `argv` with `program` (and its subcommands, told to throw rather than exit): undefined
 * when the command is to run, else its exit code (0 after help asked for, 2 after a usage error,
 * which is written to `err`, or help shown for want of a subcommand).
 */
export const parseArguments = async (program: Command, argv: ReadonlyArray<string>, err: (text: string) => void, name: string): Promise<number | undefined> => {
  try {
    await program.parseAsync([...argv], { from: "user" })
    return undefined
  } catch (e) {
    if (!(e instanceof CommanderError)) throw e
    if (helpAsked(e)) return 0
    // The help itself is written already; its placeholder message says nothing.
    if (e.code !== "commander.help") err(`${name}: ${e.message.replace(/^error: /, "")}\n`)
    return 2
  }
}

/**
 * Runs the action a file-editing command chose: 0 done, 2 a usage error (or no action: the help is
 * written), 1 when the file cannot be read or written (`fileError`, or any system error).
 */
export const runFileAction = async (
  action: (() => Promise<void>) | undefined,
  program: Command,
  err: (text: string) => void,
  name: string,
  fileError: (e: unknown) => boolean
): Promise<number> => {
  if (action === undefined) {
    err(program.helpInformation())
    return 2
  }
  try {
    await action()
    return 0
  } catch (e) {
    if (e instanceof UsageError) {
      err(`${name}: ${e.message}\n`)
      return 2
    }
    if (fileError(e) || (typeof e === "object" && e !== null && "code" in e)) {
      err(`${name}: ${(e as Error).message}\n`)
      return 1
    }
    throw e
  }
}

/** Every request to the store is bounded: a store that does not answer fails the command. */
const REQUEST_TIMEOUT_MS = 10_000

/** An answer of the store: its status and JSON body (empty when it is none). */
export interface StoreAnswer {
  readonly status: number
  readonly body: Record<string, any>
}

/**
 * A client of a running store: its URL (`--url`, else MCPSTORE_HOST and MCPSTORE_PORT) and key
 * (`--api-key`, else MCPSTORE_API_KEY). A request's time-out is `timeoutMs` (default 10 s).
 */
export const storeClient = (options: { readonly url?: string | undefined; readonly apiKey?: string | undefined }, env: NodeJS.ProcessEnv) => {
  const base = (options.url ?? `http://${env["MCPSTORE_HOST"] ?? "127.0.0.1"}:${env["MCPSTORE_PORT"] ?? "18200"}`).replace(/\/+$/, "")
  const key = options.apiKey ?? env["MCPSTORE_API_KEY"]
  const request = async (method: "GET" | "POST", path: string, body?: unknown, timeoutMs = REQUEST_TIMEOUT_MS): Promise<StoreAnswer> => {
    const answer = await fetch(`${base}${path}`, {
      method,
      headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...(key !== undefined && key !== "" ? { authorization: `Bearer ${key}` } : {}) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(timeoutMs)
    })
    return { status: answer.status, body: (await answer.json().catch(() => ({}))) as Record<string, any> }
  }
  return { base, request }
}

/** The options of a command that talks to a running store. */
export const withStoreOptions = (program: Command): Command =>
  program
    .option("--url <url>", "the store's URL (default: http://<MCPSTORE_HOST or 127.0.0.1>:<MCPSTORE_PORT or 18200>)")
    .option("--api-key <key>", "the store's API key (default: MCPSTORE_API_KEY)")
