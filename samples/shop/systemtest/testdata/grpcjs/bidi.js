// A bidi stream from @grpc/grpc-js: node bidi.js ADDR METHOD WORD...
// It sends each word as the message {text: WORD}, the next once the reply
// to the last came, then half-closes. It prints each reply's text on a
// line of its own, then the status as JSON on the last.
// The messages are encoded by hand: field 1, a string, no generated code.
const grpc = require("@grpc/grpc-js");

const [addr, method, ...words] = process.argv.slice(2);

function encode(m) {
  const b = Buffer.from(m.text, "utf8");
  if (b.length > 127) throw new Error("text too long for this encoder");
  return Buffer.concat([Buffer.from([0x0a, b.length]), b]);
}

function decode(buf) {
  let text = "";
  for (let i = 0; i < buf.length; ) {
    const tag = buf[i++];
    const len = buf[i++];
    if (tag === 0x0a) text = buf.subarray(i, i + len).toString("utf8");
    i += len;
  }
  return { text };
}

const client = new grpc.Client(addr, grpc.credentials.createInsecure());
const call = client.makeBidiStreamRequest(method, encode, decode, new grpc.Metadata(),
  { deadline: Date.now() + 30000 });
let next = 0;
function send() {
  if (next < words.length) call.write({ text: words[next++] });
  else call.end();
}
call.on("data", (m) => {
  console.log(m.text);
  send();
});
call.on("status", (s) => {
  console.log(JSON.stringify({ code: s.code, details: s.details }));
  client.close();
});
call.on("error", () => {}); // the status says it
send();
