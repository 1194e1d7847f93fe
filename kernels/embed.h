/* embed.h - token plus position embedding and its backward (CPU loops of embed_elem.h).
 * tok[N] are row indices of wte[V, C] (the caller checks them against V); wpe is [T, C]. */
#ifndef KERNELS_EMBED_H
#define KERNELS_EMBED_H

void k_embed(float *out, const int *tok, const float *wte, const float *wpe, int N, int T,
             int C);
/* dwte += ..., dwpe += ... */
void k_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int N, int T,
                 int C);

#endif
