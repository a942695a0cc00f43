// Preloaded into the reference server (node --require): its HTTP mode listens on every interface
// for a bare port; the tests bind 127.0.0.1 only, so a listen(port, ...) gets host 127.0.0.1.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    const callbacks = args.slice(1).filter((arg) => typeof arg === "function");
    return listen.call(this, { port: Number(args[0]), host: "127.0.0.1" }, ...callbacks);
  }
  return listen.apply(this, args);
};
